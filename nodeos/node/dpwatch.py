"""Watch the data plane under a running daemon: a dead target is reported, and re-exported
when it returns (issues 9 and 10).

Every EVERY_S a probe runs in a thread of its own, off the data plane queue (a long data plane
call must not hide a dead target, nor a dead one block the probe):
- SPDK: `spdk_get_version` over a fresh connection to its RPC socket, PROBE_TIMEOUT_S at most;
  the socket file (inode, change time) and the pid listening on it tell a restarted target (an
  empty one) from the one we exported on;
- kernel: nvmet's configfs is there, and every subsystem of a ready volume record that it held
  before is there and linked to a port.

`decide` (pure) turns probes and time into health, with hysteresis: the data plane is called
down once its probes have failed for DOWN_AFTER_S (MIN_FAILS probes at least, so one slow
probe never flips it), and up again once a re-apply ran after it answered and UP_AFTER probes
in a row found it whole. Detection bound: EVERY_S + DOWN_AFTER_S + PROBE_TIMEOUT_S = 5 s for a
hung target, EVERY_S + DOWN_AFTER_S = 3 s for a dead one (refused connection, nvmet gone);
a target restarted between two probes is seen at the next probe (EVERY_S).

While down: `nodeos status` and the node's report say so (since, reason), the agent reconciles
nothing, and the node stops renewing its lease, so its replicated primaries fail over within
the bound plus the lease (docs/cluster.md). Once the target answers again the node's own
re-export (NodeService._reconcile, the start-up path) re-applies every pool and export.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from nodeos.daemon.periodic import Periodic

LOG = logging.getLogger("nodeosd.dpwatch")
EVERY_S = 1.0
PROBE_TIMEOUT_S = 2.0
DOWN_AFTER_S = 2.0
MIN_FAILS = 2
UP_AFTER = 2
REAPPLY_EVERY_S = 5.0  # a re-apply that failed is tried again after this long
BOUND_S = EVERY_S + DOWN_AFTER_S + PROBE_TIMEOUT_S


@dataclass(frozen=True)
class Probe:
    """One look at the target: `alive` it answers; `problem` what is wrong (None: whole);
    `instance` which process answers (a change means it restarted, empty)."""

    alive: bool
    problem: str | None = None
    instance: Any = None
    present: frozenset[str] | None = None  # kernel: which asked-for exports it holds


@dataclass(frozen=True)
class Health:
    state: str = "up"  # up | down
    since: float | None = None  # wall clock: when the data plane went down
    reason: str | None = None
    failing_since: float | None = None  # monotonic start of the current run of failed probes
    fails: int = 0
    oks: int = 0
    instance: Any = None
    reapplied: bool = False  # a re-apply completed since the data plane answered again
    reapply_at: float | None = None  # monotonic: the last re-apply started

    def view(self) -> dict[str, Any]:
        return {"state": self.state, "since": self.since, "reason": self.reason, "bound_s": BOUND_S}


def decide(h: Health, p: Probe, now: float, wall: float) -> tuple[Health, str | None]:
    """The next health after probe `p` (started at monotonic `now`) and what to do:
    "down" (report it), "reapply" (re-export everything), "up" (report it) or None."""
    restarted = p.alive and h.instance is not None and p.instance is not None and p.instance != h.instance
    if restarted:
        reason = "the data plane restarted: its exports are gone"
        h = replace(h, instance=p.instance, reapplied=False, oks=0, reapply_at=None)
        if h.state == "up":
            return replace(h, state="down", since=wall, reason=reason, failing_since=None, fails=0), "down"
    if p.alive and p.instance is not None:
        h = replace(h, instance=p.instance)
    if p.alive and p.problem is None:
        h = replace(h, fails=0, failing_since=None)
        if h.state == "up":
            return h, None
        if not h.reapplied:
            return _reapply(h, now)
        h = replace(h, oks=h.oks + 1)
        if h.oks >= UP_AFTER:
            return Health(instance=h.instance), "up"
        return h, None
    reason = p.problem or "the data plane does not answer"
    h = replace(
        h, fails=h.fails + 1, failing_since=now if h.failing_since is None else h.failing_since, oks=0
    )
    if h.state == "up":
        assert h.failing_since is not None
        if h.fails >= MIN_FAILS and now - h.failing_since >= DOWN_AFTER_S:
            since = wall - (now - h.failing_since)  # the first failed probe
            return replace(h, state="down", since=since, reason=reason, reapplied=False), "down"
        return h, None
    h = replace(h, reason=reason)
    if p.alive:
        # It answers but is not whole (nvmet back but empty; a re-apply that did not take).
        return _reapply(replace(h, reapplied=False), now)
    return replace(h, reapplied=False), None


def _reapply(h: Health, now: float) -> tuple[Health, str | None]:
    if h.reapply_at is not None and now - h.reapply_at < REAPPLY_EVERY_S:
        return h, None
    return replace(h, reapply_at=now), "reapply"


def applied(h: Health, ok: bool) -> Health:
    """A re-apply finished (`ok`: without an error): the next whole probes count toward up."""
    return replace(h, reapplied=ok, oks=0)


# --- probes (blocking: run in a thread) -------------------------------------------------------


def probe_spdk(sock_path: str, timeout_s: float = PROBE_TIMEOUT_S) -> Probe:
    try:
        st = os.stat(sock_path)
    except OSError as err:
        return Probe(False, f"SPDK's RPC socket {sock_path}: {err.strerror or err}")
    # The inode alone does not tell a restarted target: a socket re-created at once gets the freed
    # inode number back (ext4 does). Its change time and the listening process's pid do.
    instance: tuple[int, ...] = (st.st_dev, st.st_ino, st.st_ctime_ns)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(sock_path)
            pid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
            instance = (*instance, pid)
            s.sendall(json.dumps({"jsonrpc": "2.0", "method": "spdk_get_version", "id": 1}).encode())
            buf = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    return Probe(False, "SPDK closed the RPC connection without an answer")
                buf += chunk
                with contextlib.suppress(ValueError):
                    reply = json.loads(buf)
                    if isinstance(reply, dict) and "version" in (reply.get("result") or {}):
                        return Probe(True, None, instance)
                    return Probe(False, f"SPDK answered spdk_get_version with {str(reply)[:120]}")
    except TimeoutError:
        return Probe(False, f"SPDK did not answer spdk_get_version within {timeout_s:g} s")
    except OSError as err:
        return Probe(False, f"SPDK's RPC socket {sock_path}: {err.strerror or err}")


def probe_kernel(root: str, nqns: Iterable[str]) -> Probe:
    """nvmet's configfs at `root`, and which of `nqns` it holds as a subsystem on some port."""
    try:
        subs = set(os.listdir(os.path.join(root, "subsystems")))
        linked: set[str] = set()
        for port in os.listdir(os.path.join(root, "ports")):
            linked.update(os.listdir(os.path.join(root, "ports", port, "subsystems")))
    except OSError as err:
        return Probe(False, f"nvmet is gone ({root}: {err.strerror or err})")
    return Probe(True, None, present=frozenset(n for n in nqns if n in subs and n in linked))


def missing(p: Probe, wanted: list[str], seen: set[str]) -> tuple[Probe, set[str]]:
    """Judge a kernel probe: an export that was there before and is wanted still but is gone is
    a problem (one never seen, e.g. a volume whose re-export failed, is reported on its own).
    Returns the probe with its problem and the exports seen from now on."""
    if p.present is None:
        return p, seen
    want = set(wanted)
    gone = sorted((want & seen) - p.present)
    if gone and p.problem is None:
        p = replace(p, problem=f"{len(gone)} export(s) missing from nvmet: {', '.join(gone[:3])}")
    return p, (seen & want) | p.present


def prober(dp: Any) -> Callable[[list[str]], Probe] | None:
    """The probe of a data plane (None: nothing to watch)."""
    rpc = getattr(dp, "rpc", None)
    if getattr(dp, "name", None) == "spdk" and rpc is not None:
        return lambda _nqns: probe_spdk(str(rpc.sock_path))
    fs = getattr(dp, "fs", None)
    if getattr(dp, "name", None) == "kernel" and fs is not None:
        return lambda nqns: probe_kernel(str(fs.root), nqns)
    return None


# --- the loop ---------------------------------------------------------------------------------


class DataPlaneWatch(Periodic):
    """Probes every EVERY_S; `on_change(up)` after a change, `reapply()` -> ok when asked."""

    every_s = EVERY_S
    what = "data plane watch"
    log = LOG

    def __init__(
        self,
        probe: Callable[[list[str]], Probe],
        expected: Callable[[], list[str]],
        reapply: Callable[[], Awaitable[bool]],
        on_change: Callable[[bool], None],
    ) -> None:
        self.probe = probe
        self.expected = expected
        self.reapply = reapply
        self.on_change = on_change
        self.health = Health()
        self.probes = 0
        self.seen: set[str] = set()

    @property
    def down(self) -> bool:
        return self.health.state == "down"

    async def tick(self) -> None:
        now, wall = time.monotonic(), time.time()
        nqns = self.expected()
        try:
            p = await asyncio.wait_for(asyncio.to_thread(self.probe, nqns), PROBE_TIMEOUT_S + 1.0)
        except TimeoutError:
            p = Probe(False, f"the data plane probe hung for {PROBE_TIMEOUT_S + 1.0:g} s")
        self.probes += 1
        p, self.seen = missing(p, nqns, self.seen)
        self.health, action = decide(self.health, p, now, wall)
        if action == "down":
            LOG.critical("data plane down: %s (primaries stop renewing their lease)", self.health.reason)
            self.on_change(False)
        elif action == "reapply":
            LOG.warning(
                "data plane answers again (%s): re-applying every pool and export", self.health.reason
            )
            ok = await self.reapply()
            self.health = applied(self.health, ok)
            if ok:
                # What the re-export could not bring back (a primary whose md does not run, an LV
                # gone) is the agent's and the re-export's report's: judged from here on.
                self.seen = set()
            if not ok:
                LOG.error("re-applying the data plane left errors; trying again in %.0f s", REAPPLY_EVERY_S)
        elif action == "up":
            LOG.warning("data plane up again: exports re-applied")
            self.on_change(True)
