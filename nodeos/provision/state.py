"""What provisioning did, recorded under the node's state directory (the persistent partition):
`<state_dir>/provision/state.json`, root-only (0700 directory, 0600 file), written whole and
renamed into place. It never holds a secret: the plan names a join token's file or credential,
never the token. `nodeos provision show` prints it; `nodeos status` shows its summary.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

STATE_FILE = "provision/state.json"


def path(state_dir: str | Path) -> Path:
    return Path(state_dir) / STATE_FILE


def load(state_dir: str | Path) -> dict[str, Any]:
    p = path(state_dir)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        return {"result": "unreadable", "error": {"code": "corrupt_record", "message": f"{p}: {exc}"}}
    return data if isinstance(data, dict) else {}


def save(state_dir: str | Path, data: dict[str, Any]) -> None:
    p = path(state_dir)
    p.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(p.parent, 0o700)
    tmp = p.with_name(f".{p.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True, default=list)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def now() -> float:
    return round(time.time(), 3)


def summary(state_dir: str | Path) -> dict[str, Any] | None:
    """The part `nodeos status` shows: the last result, its source, the error with its field and
    what is allowed, and the cluster step. None: this node was never provisioned."""
    st = load(state_dir)
    if not st:
        return None
    out: dict[str, Any] = {k: st.get(k) for k in ("result", "source", "checked_at") if k in st}
    if st.get("error"):
        out["error"] = st["error"]
    applied = st.get("applied") or {}
    if applied:
        out["applied_from"] = applied.get("source")
        out["applied_at"] = applied.get("at")
    cluster = st.get("cluster")
    if cluster:
        out["cluster"] = {k: v for k, v in cluster.items() if k in ("action", "state", "cluster_id", "error")}
    return out
