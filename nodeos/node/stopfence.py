"""`nodeos-fence`: fence this node's replicated front ends after the daemon stopped (issue 9).

nvmet (or a separate SPDK target) and md keep serving when nodeosd is gone: crashed, killed -9,
killed by the watchdog or stopped. Were it gone longer than its lease, the leader would fail
its volumes over while the old front ends still answer ANA optimized: two writable primaries,
and hosts reading stale data from the old one. systemd runs this after every stop of the unit
(`ExecStopPost=`, systemd/nodeosd.service): every replicated volume's front end goes ANA
inaccessible through the lease keeper's own data plane call (`DataPlane.fence_export`). A
small program of its own (no daemon imports): it must be done well within the ~0.9 lease the
leader waits after the daemon's last renewal before it calls the node down.

It needs neither the daemon nor the cluster: the node's records (LMDB, opened read-only; a
dead writer leaves the last committed state) name the front ends, the data plane (configfs or
SPDK's RPC socket) fences them. Every replicated volume counts, whatever its role or state:
one caught mid-promotion may already serve optimized; a secondary's front end is inaccessible
already and stays so. Records that cannot be read fall back to the data plane: every volume
export of a mirror or a view (not a plain LV) is fenced. Non-replicated volumes keep serving.
The restarted daemon starts fenced and lifts it only after a granted lease
(nodeos/agent/lease.py).

Exit 0: every front end fenced (or none to fence); 1: a fence failed (logged as critical, the
unit ignores the code so a restart still comes) or the daemon still runs on the state dir.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nodeos.dataplane.base import ExportInfo
from nodeos.dataplane.mirror_names import VOLUME_NQN_PREFIX
from nodeos.errors import EXIT_FAILED, NodeosError

LOG = logging.getLogger("nodeosd.fence")


# --- pure ------------------------------------------------------------------------------


def fence_targets(volumes: Iterable[dict[str, Any]]) -> dict[str, str]:
    """{front-end NQN: volume name} of every replicated volume in the node's records."""
    out: dict[str, str] = {}
    for v in volumes:
        if int(v.get("replicas") or 1) > 1 and v.get("nqn"):
            out[str(v["nqn"])] = str(v.get("name") or v["nqn"])
    return out


def fallback_targets(exports: Iterable[ExportInfo]) -> dict[str, str]:
    """When the records cannot be read: every volume front end that exports a mirror or a view
    rather than a plain LV (a replicated volume's), by NQN."""
    return {
        e.nqn: e.nqn
        for e in exports
        if e.nqn.startswith(VOLUME_NQN_PREFIX) and e.pool_id is None and e.device is not None
    }


# --- shell -----------------------------------------------------------------------------


def read_volumes(node_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The node's volume records, read-only and without a reader lock (the caller holds the
    state dir's flock: no daemon writes); (records, what could not be read)."""
    import lmdb

    from nodeos.store.lmdb_store import decode

    if not (node_dir / "data.mdb").exists():
        return [], []
    out: list[dict[str, Any]] = []
    problems: list[str] = []
    try:
        env = lmdb.open(str(node_dir), readonly=True, lock=False, subdir=True, max_dbs=32)
    except lmdb.Error as exc:
        return [], [f"{node_dir}: {exc}"]
    try:
        try:
            db = env.open_db(b"volumes", create=False)
        except lmdb.NotFoundError:
            return [], []
        with env.begin(db=db) as txn:
            for k, raw in txn.cursor():
                try:
                    rec = decode(bytes(raw), db="volumes", key=bytes(k))
                except Exception as exc:  # one bad record: the others are still fenced
                    problems.append(f"volume record {bytes(k)!r}: {exc}")
                    continue
                if isinstance(rec, dict):
                    out.append(rec)
    except lmdb.Error as exc:
        problems.append(f"{node_dir}: {exc}")
    finally:
        env.close()
    return out, problems


def _state_lock(state_dir: Path) -> int | None:
    """The daemon's state dir flock, taken so no daemon starts meanwhile; None when nodeosd
    holds it (it lives: its lease keeper fences). A missing state dir: -1 (nothing to fence)."""
    try:
        fd = os.open(state_dir / "nodeosd.lock", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def process_age_s() -> float:
    """Seconds since this process started (interpreter start-up and imports included: under
    TCG they, not the fence, take most of the time)."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return -1.0


def fence(dp: Any, targets: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """Fence each target: (names fenced, {name: why} for those that failed). An export that is
    not there serves nothing and counts as neither."""
    done: list[str] = []
    failed: dict[str, str] = {}
    for nqn, name in sorted(targets.items(), key=lambda t: t[1]):
        try:
            if dp.fence_export(nqn):
                done.append(name)
        except Exception as err:
            failed[name] = err.message if isinstance(err, NodeosError) else f"{type(err).__name__}: {err}"
    return done, failed


def run(state_dir: Path, dataplane: str, spdk_socket: str) -> int:
    """Fence this node's replicated front ends; the exit code (see the module's doc)."""
    from nodeos.dataplane.select import choose, spdk_running  # the daemon's own choice

    started = time.monotonic()
    lock = _state_lock(state_dir)
    if lock is None:
        LOG.error("fence: nodeosd runs on %s: its lease keeper fences; nothing done", state_dir)
        return EXIT_FAILED
    if lock == -1:
        LOG.info("fence: no state in %s: nothing to fence", state_dir)
        return 0
    try:
        vols, problems = read_volumes(state_dir / "node")
        targets = fence_targets(vols)
        for p in problems:
            LOG.error("fence: cannot read the node's records: %s", p)
        if not targets and not problems:
            LOG.info("fence: no replicated volume on this node")
            return 0
        try:
            dp = choose(dataplane, spdk_socket, state_dir=state_dir)
        except NodeosError as err:
            # Nothing answers (nvmet unloaded, SPDK gone): nothing serves either.
            LOG.warning("fence: no data plane reachable (%s): nothing serves to fence", err.message)
            return 0
        if getattr(dp, "name", "none") == "none":
            return 0
        if dp.name == "spdk" and not spdk_running(spdk_socket):
            # The image's nvmf_tgt stopped or crashed with the daemon: its subsystems went with it.
            LOG.warning("fence: no SPDK target runs on %s: nothing serves to fence", spdk_socket)
            return 0
        if problems:
            try:
                targets.update(fallback_targets(dp.list_exports()))
            except Exception as exc:
                LOG.critical("fence: cannot list the data plane's exports either: %s", exc)
                return EXIT_FAILED
        done, failed = fence(dp, targets)
        took = time.monotonic() - started
        for name, why_not in sorted(failed.items()):
            LOG.critical(
                "fence FAILED: volume %s may still serve I/O as primary while another node takes"
                " over (split brain): %s",
                name,
                why_not,
            )
        LOG.warning(
            "daemon stopped (%s): fenced %d replicated front end(s) in %.2f s (%s; %.2f s since this"
            " program started): %s",
            os.environ.get("SERVICE_RESULT", "by hand"),
            len(done),
            took,
            dp.name,
            process_age_s(),
            ", ".join(done) or "none exported",
        )
        return EXIT_FAILED if failed or problems else 0
    finally:
        os.close(lock)


def settings(data: dict[str, Any], overrides: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The few settings the fence needs, from the config file's keys and the flags; a bad or
    unreadable value falls back to its default (a config the daemon would refuse must not stop
    the fence): (settings, what fell back)."""
    from nodeos.daemon.config import DATAPLANES, LOG_LEVELS, Config

    out: dict[str, str] = {}
    bad: list[str] = []
    for key in ("state_dir", "dataplane", "spdk_socket", "log_level"):
        default = str(getattr(Config(), key))
        v = overrides.get(key) if overrides.get(key) is not None else data.get(key, default)
        ok = isinstance(v, str) and bool(v)
        if key == "dataplane":
            ok = v in DATAPLANES
        elif key == "log_level":
            ok = v in LOG_LEVELS
        if not ok:
            bad.append(f"{key} {v!r}: using {default!r}")
            v = default
        out[key] = str(v)
    return out, bad


def _config_file(path: str | None) -> tuple[dict[str, Any], list[str]]:
    import tomllib

    from nodeos.daemon.config import DEFAULT_CONFIG

    p = Path(path or DEFAULT_CONFIG)
    try:
        return tomllib.loads(p.read_text()), []
    except FileNotFoundError:
        return {}, ([] if p == Path(DEFAULT_CONFIG) else [f"config file {p} does not exist"])
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return {}, [f"config file {p}: {exc}"]


def _log_to_stderr(level: str, journal: bool) -> None:
    """Plain stderr, which systemd files under the unit; under the journal each line carries
    its priority (`<2>` critical ... `<6>` info), so a failed fence shows as critical. Not
    python-systemd: one import less before the fence lands."""
    prio = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}

    class Fmt(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            text = super().format(record)
            return f"<{prio.get(record.levelno, 6)}>{text}" if journal else text

    h = logging.StreamHandler()
    h.setFormatter(Fmt("%(message)s" if journal else "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [h]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))


def main(argv: list[str] | None = None) -> int:
    """`nodeos-fence`: the unit's ExecStopPost. Imports only what the fence needs, so it is
    done well within the time the leader waits before calling this node down."""
    import argparse

    from nodeos.daemon import logsetup

    p = argparse.ArgumentParser(
        prog="nodeos-fence",
        description="after nodeosd stopped: every replicated volume's front end on this node goes "
        "ANA inaccessible (docs/operations.md, Failover)",
    )
    p.add_argument("--config", default=None, help="nodeosd's TOML config file (for state_dir, dataplane)")
    p.add_argument("--state-dir", dest="state_dir")
    p.add_argument("--dataplane")
    p.add_argument("--spdk-socket", dest="spdk_socket")
    args = p.parse_args(argv)
    data, problems = _config_file(args.config)
    s, bad = settings(data, {k: v for k, v in vars(args).items() if k != "config"})
    _log_to_stderr(s["log_level"], logsetup.under_journal())
    for why in problems + bad:
        LOG.error("fence: config: %s (the defaults are used)", why)
    return run(Path(s["state_dir"]), s["dataplane"], s["spdk_socket"])


if __name__ == "__main__":
    import sys

    sys.exit(main())
