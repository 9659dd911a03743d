"""The imperative shell of provisioning: check the chosen source whole, then write its files
under a root (`/`, or a test's directory), idempotently; later, once nodeosd is ready, run the
cluster step (init or join, then labels) through the daemon's own API, once.

Two phases, two units (systemd/nodeos-provision*.service):
- `system`, before the network and nodeosd: the configuration is checked whole (an invalid one
  changes nothing and is recorded with its field), a join token is checked and staged in a
  root-only runtime directory, the files are written (a file already right is not touched).
- `cluster`, after nodeosd is ready: `cluster.init` or `cluster.join` as `nodeos cluster` calls
  them, recorded once done (a second boot never joins again), then `node.label`.
The join token travels only from its file or credential to the daemon's socket: never argv,
never a log line, never the state file, never a file anyone but root can read.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from nodeos.errors import BadInput, NodeosError, OperationFailed
from nodeos.provision import model, render, sources
from nodeos.provision import state as record
from nodeos.provision.render import FileSpec

log = logging.getLogger("nodeos.provision")

RUNTIME_DIR = "/run/nodeos-provision"
STAGED_TOKEN = "join-token"
JOIN_WAIT_S = 900.0  # a join retries this long (the member may still be booting)


class Caller(Protocol):
    def call(self, method: str, params: dict[str, Any] | None = None) -> Any: ...


@dataclass
class Outcome:
    result: str  # none | invalid | failed | applied | unchanged | done | skipped
    source: str | None = None
    changed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, [])}


# --- files ----------------------------------------------------------------------------------


def _ensure_dirs(root: Path, rel: str, dir_mode: int) -> None:
    parts = Path(rel).parent.parts
    cur = root
    for i, part in enumerate(parts):
        cur = cur / part
        if not cur.exists():
            cur.mkdir(mode=dir_mode if i == len(parts) - 1 else 0o755)
            os.chmod(cur, dir_mode if i == len(parts) - 1 else 0o755)
    # The file's own directory keeps what it needs (~/.ssh: 0700 or sshd refuses the keys).
    if parts and dir_mode != 0o755 and (cur.stat().st_mode & 0o777) != dir_mode:
        os.chmod(cur, dir_mode)


def write_file(root: Path, rel: str, spec: FileSpec) -> bool:
    """Make root/rel hold spec; False when it already did (content and mode): nothing touched."""
    target = root / rel
    data = spec.content.encode()
    try:
        st = target.stat()
        if (st.st_mode & 0o7777) == spec.mode and target.read_bytes() == data:
            _ensure_dirs(root, rel, spec.dir_mode)
            return False
    except FileNotFoundError:
        pass
    _ensure_dirs(root, rel, spec.dir_mode)
    tmp = target.with_name(f".{target.name}.nodeos-provision.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, spec.mode)
    try:
        os.fchmod(fd, spec.mode)  # the umask must not widen or narrow it
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    return True


def write_all(root: Path, files: dict[str, FileSpec], before: list[str]) -> list[str]:
    """Write every file; remove the ones an earlier provisioning wrote that the plan no longer
    has (never nodeosd.toml: its other keys are the operator's). Returns what changed."""
    changed = [rel for rel, spec in sorted(files.items()) if write_file(root, rel, spec)]
    for rel in sorted(set(before) - set(files) - {render.NODEOSD_TOML}):
        p = root / rel
        if p.exists():
            p.unlink()
            changed.append(f"-{rel}")
    return changed


# --- the join token ------------------------------------------------------------------------


def read_token(plan: model.ClusterPlan, creds_dir: str) -> str:
    """The join token named by the plan, checked; BadInput names the field that named it."""
    from nodeos.cluster.token import decode_token

    if plan.token_credential:
        fld, p = "cluster.token_credential", Path(creds_dir) / plan.token_credential
    else:
        assert plan.token_file is not None
        fld, p = "cluster.token_file", Path(plan.token_file)
    try:
        token = p.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise BadInput(
            f"{fld}: {p} cannot be read ({reason})",
            field=fld,
            allowed="a readable file holding the join token",
        ) from None
    try:
        decode_token(token)
    except BadInput:
        raise BadInput(
            f"{fld}: {p} does not hold a join token",
            field=fld,
            allowed="a token from `nodeos cluster init` or `nodeos cluster token`",
        ) from None
    return token


def stage_token(runtime_dir: Path, token: str) -> None:
    runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(runtime_dir, 0o700)
    spec = FileSpec(token + "\n", mode=0o600, dir_mode=0o700)
    write_file(runtime_dir, STAGED_TOKEN, spec)


# --- phase 1: the system ---------------------------------------------------------------------


def _error(err: NodeosError) -> dict[str, Any]:
    return err.to_dict()


def check_found(found: sources.Found) -> model.Plan:
    """The Plan of a source, or its BadInput (pure: reads nothing more)."""
    if found.error is not None:
        raise found.error
    assert found.doc is not None
    return model.parse(found.doc, found.base)


def apply_system(
    root: Path,
    state_dir: Path,
    found: sources.Found | None,
    ignored: list[sources.Found],
    *,
    creds_dir: str,
    runtime_dir: Path,
    effects: bool,
) -> Outcome:
    """Phase 1. Raises the BadInput of an invalid configuration after recording it; nothing of
    it is applied (files, hostname, token: all or nothing, checked before the first write)."""
    st = record.load(state_dir)
    st["checked_at"] = record.now()
    st["ignored"] = [f.label for f in ignored]
    if found is None:
        st.update(result="none", source=None, error=None)
        record.save(state_dir, st)
        return Outcome(
            "none",
            notes=[
                "no configuration: no credential, no config partition, nothing on the kernel command line"
            ],
        )
    st["source"] = found.label
    cluster_done = (st.get("cluster") or {}).get("state") == "done"
    try:
        plan = check_found(found)
        if plan.cluster is not None and plan.cluster.action == "join" and not cluster_done:
            token = read_token(plan.cluster, creds_dir)
        else:
            token = None
        existing = _read_text(root / render.NODEOSD_TOML)
        files = render.render(plan, found.label, existing)
    except NodeosError as err:
        st.update(result="invalid" if isinstance(err, BadInput) else "failed", error=_error(err))
        record.save(state_dir, st)
        log.error("provisioning from %s refused, nothing applied: %s", found.label, err.message)
        raise
    before = list((st.get("applied") or {}).get("files") or [])
    changed = write_all(root, files, before)
    if token is not None:
        stage_token(runtime_dir, token)
    if effects and changed:
        _effects(plan, changed)
    st.update(result="applied" if changed else "unchanged", error=None)
    st["applied"] = {
        "source": found.label,
        "where": found.where,
        "digest": found.digest,
        "at": record.now(),
        "files": sorted(files),
        "plan": plan.to_dict(),
    }
    if plan.cluster is not None and not cluster_done:
        st["cluster"] = {"action": plan.cluster.action, "state": "pending"}
    record.save(state_dir, st)
    for rel in changed:
        log.info(
            "provisioning from %s: %s %s",
            found.label,
            "removed" if rel[0] == "-" else "wrote",
            rel.lstrip("-"),
        )
    return Outcome(st["result"], source=found.label, changed=changed)


def _read_text(p: Path) -> str | None:
    try:
        return p.read_text()
    except FileNotFoundError:
        return None


def _effects(plan: model.Plan, changed: list[str]) -> None:
    """On the running system (root `/` only): the kernel's host name, and a reload of the
    services whose files changed when they already run (at boot they start after us)."""
    if plan.hostname and render.HOSTNAME in changed:
        with contextlib.suppress(OSError):
            Path("/proc/sys/kernel/hostname").write_text(plan.hostname)
    units = []
    if any(c.lstrip("-").startswith(render.NETWORK_DIR) for c in changed):
        units.append("systemd-networkd.service")
    if render.TIMESYNCD_DROPIN in changed:
        units.append("systemd-timesyncd.service")
    if render.SSHD_DROPIN in changed:
        units.append("ssh.service")
    if units:
        subprocess.run(
            ["systemctl", "--no-block", "try-reload-or-restart", *units], capture_output=True, timeout=60
        )


# --- phase 2: the cluster --------------------------------------------------------------------


def apply_cluster(
    state_dir: Path,
    client: Caller,
    *,
    runtime_dir: Path,
    wait_s: float = JOIN_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Phase 2: init or join once (recorded; a node already a member is recorded as such), then
    the labels. Only the cluster id and node id of the daemon's answer are kept: `cluster.init`
    answers with a join token, which is neither printed nor recorded."""
    st = record.load(state_dir)
    applied = st.get("applied") or {}
    plan = applied.get("plan") or {}
    if st.get("result") in ("invalid", "failed") or not applied:
        return Outcome("skipped", notes=["no valid configuration applied: nothing to do in the cluster"])
    out = Outcome("done", source=applied.get("source"))
    cl = plan.get("cluster")
    cur = st.get("cluster") or {}
    if cl and cur.get("state") != "done":
        try:
            cur = _cluster_step(cl, client, runtime_dir, wait_s, sleep, clock)
        except NodeosError as err:
            st["cluster"] = {"action": cl["action"], "state": "failed", "error": _error(err)}
            record.save(state_dir, st)
            log.error("provisioning: cluster %s failed: %s", cl["action"], err.message)
            raise
        st["cluster"] = cur
        record.save(state_dir, st)
        out.changed.append(f"cluster {cl['action']}: {cur.get('cluster_id')}")
    elif cl:
        out.notes.append(f"already {cur.get('how', 'joined')} cluster {cur.get('cluster_id')}: not run again")
    labels = plan.get("labels") or {}
    before = st.get("labels_applied") or {}
    # A label an earlier configuration set and this one no longer has is removed; labels set by
    # hand (`nodeos node label`) are not provisioning's and are left alone.
    gone = sorted(set(before) - set(labels))
    if labels != before:
        name = client.call("status", {}).get("node_name")
        client.call("node.label", {"node": name, "set": labels, "remove": gone})
        st["labels_applied"] = labels
        record.save(state_dir, st)
        said = [f"{k}={v}" for k, v in sorted(labels.items())] + [f"{k}-" for k in gone]
        out.changed.append("labels " + " ".join(said))
    if not out.changed:
        out.result = "unchanged"
    return out


def _cluster_step(
    cl: dict[str, Any],
    client: Caller,
    runtime_dir: Path,
    wait_s: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> dict[str, Any]:
    status = client.call("cluster.status", {}) or {}
    if status.get("member") and not status.get("solo"):
        # Done before (the record lost, or made by hand): recorded, never run twice. A lone node
        # is a cluster of one (`solo`): that is what init and join start from.
        return {
            "action": cl["action"],
            "state": "done",
            "how": "found a member of",
            "cluster_id": status.get("cluster_id"),
            "node_id": status.get("node_id"),
        }
    if cl["action"] == "init":
        r = client.call("cluster.init", {})
        return {
            "action": "init",
            "state": "done",
            "how": "created",
            "cluster_id": r.get("cluster_id"),
            "node_id": r.get("node_id"),
        }
    token_path = runtime_dir / STAGED_TOKEN
    try:
        token = token_path.read_text().strip()
    except OSError:
        raise OperationFailed(
            "the join token was not staged by the system phase (nodeos-provision.service)",
            field="cluster.token_file",
        ) from None
    deadline = clock() + wait_s
    while True:
        try:
            r = client.call("cluster.join", {"address": cl["address"], "token": token})
            break
        except BadInput:
            raise
        except NodeosError as err:
            if clock() >= deadline:
                raise
            log.warning("provisioning: join %s not yet: %s; trying again", cl["address"], err.message)
            sleep(5.0)
    token_path.unlink(missing_ok=True)
    return {
        "action": "join",
        "state": "done",
        "how": "joined",
        "address": cl["address"],
        "cluster_id": r.get("cluster_id"),
        "node_id": r.get("node_id"),
    }
