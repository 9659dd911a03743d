"""The failover workload's simulated data plane and host (fakes, named as such: only the
simulator uses them), and the data invariants checked against them.

`SimDataPlane` holds, per volume and per replica node, the blocks written: lba -> (version,
epoch of the primary that wrote it), and the highest epoch each replica was retargeted to.
Versions come from one counter at the host, so a later write always carries a higher
version: a block holding less than the last acknowledged version of its lba lost a write.

`SimHost` keeps up to its queue depth (1, 2 or 4 per seed) of writes in flight per volume,
never two to one block, to the node it believes is the optimized primary; a refused or
unanswered write is sent again, the same lba and version, to the next path (multipath
resubmits the command on another path); an acknowledged write is recorded. It stops writing to
a volume once it is deleted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodeos.storage.failover_map import in_sync_of

from .invariants import Violation

if TYPE_CHECKING:
    from .failover_sim import FailoverSimulation

HOST = 0  # the host's id on the simulated network (nodes are 1..N)
LBAS = 16
HOST_TIMEOUT_MS = 400  # the host's I/O timeout before it resubmits on another path
HOST_GAP_MS = (5, 30)
FO_HOST = 102  # failover_sim.py's host event


@dataclass
class SimDataPlane:
    blocks: dict[tuple[str, int], dict[int, tuple[int, int]]] = field(default_factory=dict)
    epoch_of: dict[tuple[str, int], int] = field(default_factory=dict)  # replica -> highest retarget

    def retarget(self, vol: str, nid: int, epoch: int) -> None:
        key = (vol, nid)
        self.epoch_of[key] = max(self.epoch_of.get(key, 0), epoch)

    def write(self, vol: str, nid: int, lba: int, version: int, epoch: int, frm: int) -> None:
        """A write lands on `nid`'s replica, sent by node `frm` as primary at `epoch`."""
        self._check_epoch(vol, nid, frm, epoch, f"write (lba {lba} v{version})")
        self.blocks.setdefault((vol, nid), {})[lba] = (version, epoch)

    def copy(self, vol: str, src: int, dst: int, epoch: int, lbas: list[int] | None = None) -> int:
        """A resync by `src` as primary at `epoch`: `dst`'s replica becomes a copy of `src`'s,
        in full (a rebuild) or in blocks `lbas` (md's bitmap: a partial resync). The blocks
        copied (the whole volume for a rebuild)."""
        self._check_epoch(vol, dst, src, epoch, "rebuild copy" if lbas is None else "partial resync")
        have = self.blocks.get((vol, src), {})
        if lbas is None:
            self.blocks[(vol, dst)] = dict(have)
            return LBAS
        mine = self.blocks.setdefault((vol, dst), {})
        for lba in lbas:
            if lba in have:
                mine[lba] = have[lba]
            else:
                mine.pop(lba, None)  # (never written on the primary: nor is it here)
        return len(lbas)

    def _check_epoch(self, vol: str, nid: int, frm: int, epoch: int, what: str) -> None:
        """Invariant 3: a replica that moved to a newer epoch takes nothing of an older primary."""
        moved = self.epoch_of.get((vol, nid), 0)
        if frm != nid and epoch < moved:
            raise Violation(
                "stale write",
                f"volume {vol[-4:]}: node {frm}'s {what} at epoch {epoch} landed on node {nid}'s "
                f"replica, retargeted to epoch {moved}",
            )

    def version(self, vol: str, nid: int, lba: int) -> int:
        return self.blocks.get((vol, nid), {}).get(lba, (0, 0))[0]


@dataclass
class HostWrite:
    lba: int
    version: int
    attempt: int = 0
    target: int = 0
    sent_ms: int = 0
    conn: int = 0  # the path's connection it went on


@dataclass
class HostVolume:
    uuid: str
    paths: list[int]  # the replica nodes (nvme connect-all finds every path)
    target: int  # the path it believes optimized
    writes: dict[int, HostWrite] = field(default_factory=dict)  # attempt -> a write in flight
    acked: dict[int, int] = field(default_factory=dict)  # lba -> last acknowledged version


class SimHost:
    """The GPU node: up to `qd` writes in flight per volume (its queue depth), never two to one
    block (a block's next write waits for the last one's answer, as a file system does)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.qd = rng.choice((1, 2, 4))
        self.vols: dict[str, HostVolume] = {}
        self.version = 0
        self.attempt = 0
        self.conn: dict[int, int] = {}  # path -> its connection (a new one after a timeout)
        self.stats = {"host_acked": 0, "host_resubmitted": 0}

    def add(self, uuid: str, paths: list[int], primary: int) -> None:
        self.vols[uuid] = HostVolume(uuid, list(paths), primary)

    def start(self, sim: FailoverSimulation, uuid: str) -> None:
        for _ in range(self.qd):
            sim._at(sim.now + self.rng.randint(1, 50), FO_HOST, (uuid, None))

    def event(self, sim: FailoverSimulation, uuid: str, attempt: int | None) -> None:
        """A new write (None), a refused attempt to send again (< 0), or an attempt's timeout."""
        hv = self.vols[uuid]
        if attempt is None:
            if sim.plane.closed(uuid, sim._latest_map()):
                return  # deleted: the host writes there no more
            busy = {w.lba for w in hv.writes.values()}
            free = [lba for lba in range(LBAS) if lba not in busy]
            if not free:
                return
            self.version += 1
            w: HostWrite | None = HostWrite(self.rng.choice(free), self.version)
        else:
            w = self._failed(sim, hv, abs(attempt), timeout=attempt > 0)
        if w is None:
            return
        self.attempt += 1
        w.attempt, w.target, w.sent_ms = self.attempt, hv.target, sim.now
        w.conn = self.conn.get(w.target, 0)
        hv.writes[w.attempt] = w
        body = {"vol": uuid, "lba": w.lba, "version": w.version, "attempt": w.attempt, "conn": w.conn}
        sim.fo_send("write", HOST, w.target, body)
        sim._at(sim.now + HOST_TIMEOUT_MS, FO_HOST, (uuid, w.attempt))

    def _failed(
        self, sim: FailoverSimulation, hv: HostVolume, attempt: int, timeout: bool
    ) -> HostWrite | None:
        """The attempt was refused or timed out: the same write on the next path. A timeout
        tears the path's connection down (what it still carries never arrives, and answers on
        it are not taken). A deleted volume's writes are given up."""
        w = hv.writes.pop(attempt, None)
        if w is None:
            return None
        if timeout and self.conn.get(w.target, 0) == w.conn:
            self.conn[w.target] = w.conn + 1
        if sim.plane.closed(hv.uuid, sim._latest_map()):
            return None
        if hv.target == w.target:
            i = hv.paths.index(hv.target) if hv.target in hv.paths else -1
            hv.target = hv.paths[(i + 1) % len(hv.paths)]
        self.stats["host_resubmitted"] += 1
        return w

    def answer(self, sim: FailoverSimulation, kind: str, body: dict[str, Any]) -> HostWrite | None:
        """A path's answer; the write when it is acknowledged."""
        hv = self.vols[body["vol"]]
        w = hv.writes.get(body["attempt"])
        if w is None or self.conn.get(w.target, 0) != w.conn:
            return None  # a late answer to an attempt given up on, or on a torn-down connection
        if kind == "w_no":
            sim._at(sim.now + 20, FO_HOST, (hv.uuid, -w.attempt))
            return None
        del hv.writes[w.attempt]
        hv.acked[w.lba] = w.version
        self.stats["host_acked"] += 1
        return w


def check_acked_on_in_sync(st: dict[str, Any], dp: SimDataPlane, host: SimHost, why: str) -> None:
    """Invariant 2: every acknowledged write is on every replica the map marks in-sync (the
    block there is at the acknowledged version or a later one)."""
    for uuid, hv in host.vols.items():
        vol = st["volumes"].get(uuid)
        if vol is None or vol["state"] == "deleting":
            continue  # deleted: its data is no longer promised
        for nid in in_sync_of(vol):
            blocks = dp.blocks.get((uuid, nid), {})
            for lba, v in hv.acked.items():
                have = blocks[lba][0] if lba in blocks else 0  # dp.version(uuid, nid, lba)
                if have < v:
                    raise Violation(
                        "acknowledged write lost",
                        f"{why}: volume {vol['name']} lba {lba}: acknowledged v{v}, node {nid} (in-sync, "
                        f"epoch {vol['epoch']}, primary {vol['primary']}) holds v{have}",
                    )
