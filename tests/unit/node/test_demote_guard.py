"""A demote never waits for ever on a leg that blocks, and never drops one before its front end is
fenced with the hosts' controllers dropped (issue 9; node/demote_guard.py).

Replica legs block on a lost path (no fast-fail, no controller loss). While the old primary
demotes, its replicas retarget to the new primary and drop its controllers at the same time, so
a leg live when the demote starts can block a moment later and hold md's stop for ever. The data
plane here records the calls in order and plays md's part (its stop waits while a leg of the
mirror blocks): the kernel target and md cannot run on this host (the lab runs the real ones,
tests/lab/test_failover.py's drain). The node's records are in a real LMDB store.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from nodeos.daemon.main import NODE_DBS
from nodeos.dataplane import mirror_names as names
from nodeos.dataplane.base import MirrorInfo, MirrorMember, RemoteInfo
from nodeos.dataplane.kernel.backend import KernelDataPlane
from nodeos.node import replicas
from nodeos.node.demote_guard import legs_to_drop
from nodeos.node.ops import Ops
from nodeos.store.lmdb_store import Store

UUID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
MID = names.mirror_id_for(UUID)
STOP_WAIT_S = 3.0  # how long md's stop waits on a blocked leg here before the test calls it hung


def nqn(node: int) -> str:
    return names.replica_nqn(UUID, str(node))


def remote(node: int, state: str) -> RemoteInfo:
    return RemoteInfo(nqn(node), None, state, f"/dev/nvme{node}n1", None)


def _record(nodes: list[int], gone: list[int] | None = None) -> dict[str, Any]:
    """The old primary's record as the agent's demote step writes it: secondary at the new epoch,
    still holding its remotes and host NQN until the demote detached them."""
    return {
        "name": "v",
        "uuid": UUID,
        "nqn": "nqn.2014-08.io.nodeos:vol:v",
        "serial": "0123456789abcdef0123",
        "nguid": "0f1e2d3c4b5a49788695a4b3c2d1e0f9",
        "pool_id": "p1",
        "vol_id": "v",
        "size_bytes": 1 << 30,
        "lv_device": "/dev/nodeos_p1/v_v",
        "device": "/dev/md/" + MID,
        "hosts": [],
        "replicas": 1 + len(nodes),
        "role": "secondary",
        "state": "demoting",
        "me": 1,
        "slot": 0,
        "epoch": 3,
        "primary_host_nqn": "nqn.2014-08.io.nodeos:node:" + "c" * 32 + ":2",
        "host_nqn": "nqn.2014-08.io.nodeos:node:" + "c" * 32 + ":1",
        "remotes": [
            {"node": n, "slot": i + 1, "trtype": "tcp", "traddr": f"198.18.0.{n}", "trsvcid": "4420"}
            for i, n in enumerate(nodes)
        ],
        **({"gone": gone} if gone else {}),
    }


# ---- the rule (pure) ------------------------------------------------------------------------
def test_no_leg_is_dropped_before_the_hosts_controllers_are() -> None:
    blocked = [remote(2, "connecting"), remote(3, "resetting")]
    assert legs_to_drop(_record([2, 3]), blocked, hosts_cut=False) == []
    assert legs_to_drop(_record([2, 3]), blocked, hosts_cut=True) == [nqn(2), nqn(3)]


def test_only_the_records_legs_that_are_not_live_are_dropped_never_a_live_one() -> None:
    other_vol = "9" * 8 + "-0000-4000-8000-" + "0" * 12
    other = RemoteInfo(names.replica_nqn(other_vol, "2"), None, "connecting", None, None)
    seen = [remote(2, "live"), remote(3, "connecting"), remote(4, "deleting"), other]
    # node 4: re-placed away, its leg maybe still in md; `other`: another volume's leg.
    assert legs_to_drop(_record([2, 3], gone=[4]), seen, hosts_cut=True) == [nqn(3), nqn(4)]
    assert legs_to_drop(_record([2, 3]), [remote(2, "live"), remote(3, "live")], hosts_cut=True) == []


def test_without_a_superblock_every_leg_goes_live_or_not_but_still_only_after_the_hosts() -> None:
    seen = [remote(2, "live"), remote(3, "connecting")]
    assert legs_to_drop(_record([2, 3]), seen, hosts_cut=True, live_too=True) == [nqn(2), nqn(3)]
    assert legs_to_drop(_record([2, 3]), seen, hosts_cut=False, live_too=True) == []


# ---- the demote's order, with md's stop waiting on a blocked leg -----------------------------
class RecordingDataPlane:
    """The kernel data plane's calls, recorded in order (from every thread); md's part played:
    `stop_mirror` waits while a leg of the mirror blocks (its superblock write), as md does,
    for at most STOP_WAIT_S, then raises instead of hanging the test. `blocks_at`: the call at
    which each node's leg stops being live (its replica dropped this node's controllers)."""

    name = "kernel"
    mirror_caps = KernelDataPlane.mirror_caps

    def __init__(self, legs: dict[int, str], blocks_at: dict[int, str]) -> None:
        self.legs = dict(legs)  # node -> controller state; dropped or detached legs leave
        self.blocks_at = blocks_at
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

    def _rec(self, method: str, *args: Any) -> None:
        with self.lock:
            self.calls.append((method, args))
            for node, at in self.blocks_at.items():
                if at == method and node in self.legs:
                    self.legs[node] = "connecting"

    def order(self) -> list[str]:
        return [m for m, _ in self.calls]

    def mirror_status(self, mid: str) -> MirrorInfo:
        self._rec("mirror_status", mid)
        members = (MirrorMember(0, "/dev/nodeos_p1/v_v", "in_sync"),)
        return MirrorInfo(mid, "/dev/md/" + mid, 1 << 30, False, members, "clean", "idle")

    def fence_export(self, nqn: str, drop_hosts: bool = False) -> bool:
        self._rec("fence_export", nqn, drop_hosts)
        return True

    def list_remotes(self) -> list[RemoteInfo]:
        with self.lock:
            return [remote(n, s) for n, s in sorted(self.legs.items())]

    def drop_mirror_leg(self, mid: str, leg: str) -> None:
        self._rec("drop_mirror_leg", mid, leg)
        with self.lock:
            self.legs = {n: s for n, s in self.legs.items() if nqn(n) != leg}
            self.changed.notify_all()

    def stop_mirror(self, mid: str) -> None:
        self._rec("stop_mirror", mid)
        deadline = time.monotonic() + STOP_WAIT_S
        with self.lock:
            while any(s != "live" for s in self.legs.values()):
                if not self.changed.wait(deadline - time.monotonic()):
                    raise RuntimeError("md's stop hung on a blocked leg")
            self.calls.append(("stop_mirror:returned", (mid,)))

    def detach_remote(self, leg: str) -> None:
        self._rec("detach_remote", leg)
        with self.lock:
            self.legs = {n: s for n, s in self.legs.items() if nqn(n) != leg}

    def apply_export(self, spec: Any) -> None:
        self._rec("apply_export", spec.nqn, spec.device, spec.ana_state)

    def ensure_view(self, view_id: str, device: str, offset: int, size: int) -> str:
        self._rec("ensure_view", view_id, device)
        return f"/dev/mapper/{names.VIEW_PREFIX}{view_id}"

    def block_view(self, view_id: str, size: int) -> str:
        self._rec("block_view", view_id)
        return f"/dev/mapper/{names.VIEW_PREFIX}{view_id}"

    def wipe_mirror_member(self, dev: str) -> None:
        self._rec("wipe_mirror_member", dev)


def _demote(tmp_path: Path, dp: RecordingDataPlane, rec: dict[str, Any]) -> dict[str, Any]:
    store = Store(tmp_path / "node", dbs=NODE_DBS)

    async def run_blocking(fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    ops = Ops(store, dp, run_blocking, lambda: (), lambda: {})
    d = {"name": "v", "me": 1, "epoch": 3}
    with store.write() as txn:
        txn.put("volumes", "v", rec)
        Ops.begin(txn, "volume.demote", d)
    try:
        asyncio.run(asyncio.wait_for(ops.mirrors.demote(d), 20))
        with store.read() as txn:
            assert txn.get("intents", d["_seq"]) is None
            return dict(txn.get("volumes", "v"))
    finally:
        store.close()


def test_a_leg_that_blocks_while_the_demote_runs_is_dropped_and_md_stops(tmp_path: Path) -> None:
    # node 2 stays live; node 3 is live when the demote looks, then its replica retargets (the
    # moment the view is swapped); node 4's replica had retargeted already.
    dp = RecordingDataPlane({2: "live", 3: "live", 4: "connecting"}, blocks_at={3: "block_view"})
    rec = _demote(tmp_path, dp, _record([2, 3, 4]))
    order = dp.order()
    dropped = [args[1] for m, args in dp.calls if m == "drop_mirror_leg"]
    assert dropped == [nqn(4), nqn(3)]  # never the live leg of node 2
    # The front end is fenced, its hosts' controllers dropped even if it was inaccessible already,
    # before anything else changes.
    assert dp.calls[1] == ("fence_export", ("nqn.2014-08.io.nodeos:vol:v", True))
    # The leg blocked from the start goes before any step that waits for md's I/O.
    first_wait = min(order.index(m) for m in ("apply_export", "ensure_view", "block_view", "stop_mirror"))
    assert order.index("drop_mirror_leg") < first_wait
    # md stopped only once the leg that blocked meanwhile was dropped; the replicas detached after.
    assert max(i for i, m in enumerate(order) if m == "drop_mirror_leg") < order.index("stop_mirror:returned")
    assert min(i for i, m in enumerate(order) if m == "detach_remote") > order.index("stop_mirror:returned")
    assert order.index("wipe_mirror_member") > order.index("stop_mirror:returned")
    assert (rec["role"], rec["state"], rec["device"]) == ("secondary", "ready", replicas.view_path(rec))
    assert "remotes" not in rec and "host_nqn" not in rec


def test_a_demote_whose_legs_stay_live_drops_none(tmp_path: Path) -> None:
    dp = RecordingDataPlane({2: "live", 3: "live"}, blocks_at={})
    rec = _demote(tmp_path, dp, _record([2, 3]))
    assert "drop_mirror_leg" not in dp.order()
    assert sorted(args[0] for m, args in dp.calls if m == "detach_remote") == [nqn(2), nqn(3)]
    assert rec["state"] == "ready"
