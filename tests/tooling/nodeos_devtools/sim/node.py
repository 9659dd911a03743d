"""One simulated node: a RawNode, its "disk" and a tiny replicated state machine.

The disk (a MemoryStorage that survives crashes) only changes when a Ready's sync
completes; a crash before that loses the Ready's writes, as a real crash loses
unsynced writes. The state machine is the list of applied commands, which makes
state-machine safety and lost acknowledgements easy to check; with the map workload each
node also applies the entries to its own real ClusterMap (entries framed as the driver
frames them: msgpack [request id, command]).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from nodeos.cluster.map import ClusterMap, decode_command
from nodeos.cluster.raft import (
    Config,
    ConfState,
    EntryType,
    HardState,
    MemoryStorage,
    RawNode,
    Ready,
    StateRole,
    decode_conf_change,
)


@dataclass
class PendingRead:
    ctx: bytes
    issued_acked: int  # number of commands acknowledged when the read was issued
    index: int = -1  # read index, once Raft answered


@dataclass
class SimNode:
    id: int
    disk: MemoryStorage  # or an LmdbRaftStorage (SimConfig.storage="lmdb"), same interface
    election_tick: int
    heartbeat_tick: int
    seed: int
    max_msg_size: int = 256
    up: bool = False
    incarnation: int = 0
    rn: RawNode | None = None
    syncing: Ready | None = None  # a Ready whose writes are not yet on disk
    lazy_hard_state: HardState | None = None  # commit-index-only change, lost in a crash
    state: list[tuple[int, bytes]] = field(default_factory=list)  # applied (index, command)
    state_set: set[bytes] = field(default_factory=set)
    applied: int = 0
    conf_state: ConfState = field(default_factory=ConfState)
    reads: dict[bytes, PendingRead] = field(default_factory=dict)
    last_role: StateRole = StateRole.FOLLOWER
    last_term: int = 0
    last_commit: int = 0
    reopen: Callable[[], MemoryStorage] | None = None  # on-disk storage: read back after a crash
    cmap: ClusterMap | None = None  # the map workload: this node's copy of the cluster map

    def start(self, broken: str | None) -> None:
        from .hooks import apply_raft_hooks

        self.incarnation += 1
        self.up = True
        self.syncing = None
        self.lazy_hard_state = None
        self.reads = {}
        snap = self.disk.snapshot()
        self.restore_state(snap.data, snap.index)
        self.conf_state = snap.meta.conf_state
        cfg = Config(
            id=self.id,
            election_tick=self.election_tick,
            heartbeat_tick=self.heartbeat_tick,
            max_size_per_msg=self.max_msg_size,  # 1 = one entry per append: most interleavings
            max_inflight_msgs=4,
            random_seed=self.seed * 1000 + self.id * 10 + self.incarnation,
        )
        self.rn = RawNode(cfg, self.disk)
        apply_raft_hooks(self.rn.raft, broken)
        self.last_role = StateRole.FOLLOWER
        self.last_term = self.rn.raft.term
        self.last_commit = self.rn.raft.log.committed

    def crash(self) -> None:
        self.up = False
        self.rn = None
        self.syncing = None  # unsynced writes are lost
        self.lazy_hard_state = None
        self.reads = {}
        self.incarnation += 1
        if self.reopen is not None:
            # The restarted node sees only what the files hold, not the storage object's memory.
            self.disk.close()  # type: ignore[attr-defined]
            self.disk = self.reopen()

    # --- state machine ---
    def restore_state(self, data: bytes, index: int) -> None:
        obj = msgpack.unpackb(data, raw=False) if data else []
        items = obj["applied"] if isinstance(obj, dict) else obj
        self.state = [(int(i), bytes(c)) for i, c in items]
        self.state_set = {c for _, c in self.state}
        self.applied = index
        if self.cmap is not None:
            m = ClusterMap()
            m.restore(obj["map"] if isinstance(obj, dict) else b"")
            # A map read back may hold its dicts in another order than the one applied in
            # (another path filled them: import, schema upgrade); apply must not depend on
            # it, so every restore reverses the order of every dict.
            m.state = reverse_dict_order(m.state)
            m.state["applied_index"] = index  # as the driver does
            self.cmap = m

    def snapshot_data(self) -> bytes:
        applied = [[i, c] for i, c in self.state]
        if self.cmap is None:
            return msgpack.packb(applied, use_bin_type=True)
        return msgpack.packb({"applied": applied, "map": self.cmap.snapshot()}, use_bin_type=True)

    def apply_map(
        self, index: int, etype: EntryType, data: bytes
    ) -> tuple[str | None, str | None, dict[str, Any]]:
        """Apply one entry to the map as the driver does: (command name, request id, result)."""
        assert self.cmap is not None
        if etype is EntryType.CONF_CHANGE or not data:
            return None, None, self.cmap.apply(index, b"")
        try:
            _rid, cmd = msgpack.unpackb(data, raw=False)
        except Exception:
            cmd = data
        cmd = cmd if isinstance(cmd, bytes) else b"\xc1"
        try:
            decoded = decode_command(cmd)
            name, rid = str(decoded["cmd"]), decoded.get("rid")
        except Exception:
            name = rid = None
        return name, rid, self.cmap.apply(index, cmd)

    def apply_entry_data(self, index: int, etype: EntryType, data: bytes) -> None:
        if etype is EntryType.CONF_CHANGE:
            assert self.rn is not None
            self.conf_state = self.rn.apply_conf_change(decode_conf_change(data))
        elif data:
            self.state.append((index, data))
            self.state_set.add(data)
        self.applied = index


def reverse_dict_order(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: reverse_dict_order(obj[k]) for k in reversed(list(obj))}
    if isinstance(obj, list):
        return [reverse_dict_order(x) for x in obj]
    return obj
