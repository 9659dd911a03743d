"""The failover workload's simulated data plane and host (fakes, named as such: only the
simulator uses them), and the data invariants checked against them.

`SimDataPlane` holds, per volume and per replica node, the blocks written: lba -> (version,
epoch of the primary that wrote it), and the highest epoch each replica was retargeted to.
Versions come from one counter at the host, so a later write always carries a higher
version: a block holding less than the last acknowledged version of its lba lost a write.

`SimHost` writes one block at a time per volume (as a host waiting on each write) to the node
it believes is the optimized primary; a refused or unanswered write is sent again, the same
lba and version, to the next path (multipath resubmits the command on another path); an
acknowledged write is recorded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from nodeos.cluster.failover_map import in_sync_of

from .invariants import Violation

HOST = 0  # the host's id on the simulated network (nodes are 1..N)
LBAS = 16
HOST_TIMEOUT_MS = 400  # the host's I/O timeout before it resubmits on another path
HOST_GAP_MS = (5, 30)


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

    def copy(self, vol: str, src: int, dst: int, epoch: int) -> None:
        """A rebuild by `src` as primary at `epoch`: `dst`'s replica becomes a copy of `src`'s."""
        self._check_epoch(vol, dst, src, epoch, "rebuild copy")
        self.blocks[(vol, dst)] = dict(self.blocks.get((vol, src), {}))

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


@dataclass
class HostVolume:
    uuid: str
    paths: list[int]  # the replica nodes (nvme connect-all finds every path)
    target: int  # the path it believes optimized
    write: HostWrite | None = None
    acked: dict[int, int] = field(default_factory=dict)  # lba -> last acknowledged version


class SimHost:
    """The GPU node: one outstanding write per volume."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.vols: dict[str, HostVolume] = {}
        self.version = 0
        self.attempt = 0
        self.conn: dict[int, int] = {}  # path -> its connection (a new one after a timeout)
        self.stats = {"host_acked": 0, "host_resubmitted": 0}

    def add(self, uuid: str, paths: list[int], primary: int) -> None:
        self.vols[uuid] = HostVolume(uuid, list(paths), primary)

    def next_write(self, uuid: str, now: int) -> HostWrite:
        hv = self.vols[uuid]
        self.version += 1
        hv.write = HostWrite(self.rng.randrange(LBAS), self.version)
        return self._send(hv, now)

    def _send(self, hv: HostVolume, now: int) -> HostWrite:
        assert hv.write is not None
        self.attempt += 1
        hv.write.attempt, hv.write.target, hv.write.sent_ms = self.attempt, hv.target, now
        return hv.write

    def failed(self, uuid: str, attempt: int, now: int, timeout: bool = False) -> HostWrite | None:
        """The attempt was refused or timed out: the same write on the next path. A timeout
        tears the path's connection down (what it still carried never arrives)."""
        hv = self.vols[uuid]
        if hv.write is None or hv.write.attempt != attempt:
            return None
        if timeout:
            self.conn[hv.write.target] = self.conn.get(hv.write.target, 0) + 1
        i = hv.paths.index(hv.target) if hv.target in hv.paths else -1
        hv.target = hv.paths[(i + 1) % len(hv.paths)]
        self.stats["host_resubmitted"] += 1
        return self._send(hv, now)

    def acked(self, uuid: str, attempt: int) -> HostWrite | None:
        hv = self.vols[uuid]
        w = hv.write
        if w is None or w.attempt != attempt:
            return None  # a late answer to an attempt given up on
        hv.acked[w.lba] = w.version
        hv.write = None
        self.stats["host_acked"] += 1
        return w


def check_acked_on_in_sync(st: dict[str, Any], dp: SimDataPlane, host: SimHost, why: str) -> None:
    """Invariant 2: every acknowledged write is on every replica the map marks in-sync (the
    block there is at the acknowledged version or a later one)."""
    for uuid, hv in host.vols.items():
        vol = st["volumes"].get(uuid)
        if vol is None:
            continue
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
