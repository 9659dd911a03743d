"""Growing a replicated volume (issue 8): the order of the steps on its nodes (pure plan), what
the primary's step does in what order, and what the leader accepts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nodeos.control import decide
from nodeos.daemon.main import NODE_DBS
from nodeos.dataplane import mirror_names as names
from nodeos.dataplane.base import MirrorCaps, MirrorInfo, RemoteInfo
from nodeos.dataplane.select import NoDataPlane
from nodeos.errors import BadInput, NotSupported
from nodeos.node import model
from nodeos.node.mirror_ops import MirrorOps
from nodeos.node.ops import Ops
from nodeos.store.lmdb_store import Store
from tests.unit.agent.test_failover_plan import ready, report, steps
from tests.unit.node.test_replicas import LST, UUID, three_node_map

MiB = 1 << 20
OLD, NEW = 64 * MiB, 96 * MiB  # placement (2, 1, 3): node 2 is the primary


def grown_map() -> dict[str, Any]:
    st = three_node_map()
    for n in (1, 2, 3):
        report(st, n, state="in-sync", size_bytes=OLD)
    st["volumes"][UUID]["size_bytes"] = NEW  # the map took the resize
    return st


def phases(st: dict[str, Any], recs: dict[int, dict[str, Any]]) -> dict[int, str | None]:
    out: dict[int, str | None] = {}
    for me in (1, 2, 3):
        got = [d for op, d in steps(st, me, {"v": recs[me]}) if op == "volume.resize"]
        out[me] = got[0]["phase"] if got else None
        assert not got or got[0]["size_bytes"] == NEW
    return out


def test_secondaries_grow_their_legs_then_the_primary_then_the_secondaries_front_ends() -> None:
    st = grown_map()
    recs = {me: ready(st, me)["v"] for me in (1, 2, 3)}
    for rec in recs.values():
        rec["size_bytes"] = OLD
    # 1. the legs first; the primary waits for every one of them.
    assert phases(st, recs) == {1: "legs", 2: None, 3: "legs"}
    recs[1] = dict(recs[1], size_bytes=NEW, front_bytes=OLD)
    report(st, 1, state="in-sync", size_bytes=NEW)
    assert phases(st, recs) == {1: None, 2: None, 3: "legs"}  # node 3's leg is not there yet
    recs[3] = dict(recs[3], size_bytes=NEW, front_bytes=OLD)
    report(st, 3, state="in-sync", size_bytes=NEW)
    # 2. every leg reported at the new size: the primary grows md and its front end.
    assert phases(st, recs) == {1: None, 2: "primary", 3: None}
    recs[2] = dict(recs[2], size_bytes=NEW, front_bytes=NEW)
    report(st, 2, state="in-sync", size_bytes=NEW)
    # 3. then the secondaries' front ends (the hosts take the size from the optimized path first).
    assert phases(st, recs) == {1: "front", 2: None, 3: "front"}
    for me in (1, 3):
        recs[me] = dict(recs[me], front_bytes=NEW)
    assert phases(st, recs) == {1: None, 2: None, 3: None}


def test_a_replica_node_that_does_not_report_the_new_size_holds_the_primary() -> None:
    st = grown_map()
    recs = {me: dict(ready(st, me)["v"], size_bytes=OLD) for me in (1, 2, 3)}
    report(st, 1, state="in-sync", size_bytes=NEW)
    del st["reports"][3]["replicas"][UUID]  # node 3 says nothing of it (down, restarting)
    assert phases(st, recs)[2] is None


class GrowOps:
    """The node's `ops.call` edge for a grow on the primary, recording the calls in order (md and
    the kernel target cannot run on this host: the lab runs the real ones)."""

    def __init__(self, remotes: list[RemoteInfo], caps: MirrorCaps) -> None:
        self.remotes = remotes
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.dp = type("DP", (), {"mirror_caps": caps, "name": "kernel"})()
        self.saved: dict[str, Any] = {}

    def spec_for(self, vol: dict[str, Any]) -> Any:
        return model.export_spec(vol, LST, {})

    async def call(self, method: str, *args: Any) -> Any:
        self.calls.append((method, args))
        if method == "list_remotes":
            return self.remotes
        if method == "grow_mirror":
            return MirrorInfo(args[0], "/dev/md/x", args[1], False, (), "clean", "idle")
        return None


def test_the_primary_grows_its_lv_then_sees_each_attached_leg_grown_then_md_then_the_front_end() -> None:
    caps = MirrorCaps(8 * MiB, views=True, write_freeze=True, superblock=True, grow=True)
    st = grown_map()
    rec = dict(ready(st, 2)["v"], size_bytes=OLD, device="/dev/md/x")
    n1 = names.replica_nqn(UUID, "1")
    ops = GrowOps([RemoteInfo(n1, None, "live", "/dev/nvme1n1", None)], caps)  # node 3's leg is out
    mirrors = MirrorOps(ops)
    done: dict[str, Any] = {}
    mirrors._finish = lambda d, vol: done.update(vol)  # type: ignore[method-assign]
    asyncio.run(mirrors.grow({"name": "v", "size_bytes": NEW, "phase": "primary"}, rec))
    order = [(m, a) for m, a in ops.calls if m != "list_remotes"]
    assert order == [
        ("resize_volume", ("pool2", rec["vol_id"], NEW + 8 * MiB)),  # the LV holds md's offset too
        ("rescan_remote", (n1, NEW + 8 * MiB)),  # only the attached leg
        ("grow_mirror", (names.mirror_id_for(UUID), NEW)),
        ("revalidate_export", (rec["nqn"],)),
    ]
    assert done["size_bytes"] == done["front_bytes"] == NEW


def test_a_secondary_grows_its_front_end_only_in_the_front_phase() -> None:
    caps = MirrorCaps(8 * MiB, views=True, write_freeze=True, superblock=True, grow=True)
    st = grown_map()
    rec = dict(ready(st, 1)["v"], size_bytes=OLD, device="/dev/mapper/front")
    ops = GrowOps([], caps)
    mirrors = MirrorOps(ops)
    done: dict[str, Any] = {}
    mirrors._finish = lambda d, vol: done.update(vol)  # type: ignore[method-assign]
    asyncio.run(mirrors.grow({"name": "v", "size_bytes": NEW, "phase": "legs"}, rec))
    # The LV grows; the front end, still at the old size, withholds its namespace (a host that
    # took the old size from it would set the primary's grown path aside for good).
    assert [m for m, _ in ops.calls] == ["resize_volume", "apply_export"]
    assert ops.calls[1][1][0].ns_enabled is False
    assert done["size_bytes"] == NEW and done["front_bytes"] == OLD
    ops.calls.clear()
    asyncio.run(mirrors.grow({"name": "v", "size_bytes": NEW, "phase": "front"}, dict(done)))
    assert [m for m, _ in ops.calls] == ["ensure_view", "apply_export", "revalidate_export"]
    assert ops.calls[0][1] == (names.view_id_for(names.mirror_id_for(UUID)), rec["lv_device"], 8 * MiB, NEW)
    assert ops.calls[1][1][0].ns_enabled is True  # back, at the new size
    assert ops.calls[2][1] == (rec["nqn"],)
    assert done["front_bytes"] == NEW


def _ready_replicated(st: dict[str, Any], grow: bool) -> dict[str, Any]:
    st["volumes"][UUID]["state"] = "ready"
    for n in (1, 2, 3):
        st["reports"][n].setdefault("dataplane", {})["mirror_grow"] = grow or n != 3
    return st


def test_the_leader_grows_a_replicated_volume_and_refuses_to_shrink_it() -> None:
    st = _ready_replicated(three_node_map(), grow=True)
    assert decide.volume_resize(st, {"name": "v", "size": NEW}) == (
        "volume_resize",
        {"name": "v", "size_bytes": NEW},
    )
    with pytest.raises(BadInput, match="volumes only grow") as err:
        decide.volume_resize(st, {"name": "v", "size": OLD - MiB})
    assert err.value.field == "size"


def test_a_replica_node_whose_data_plane_cannot_grow_is_named() -> None:
    st = _ready_replicated(three_node_map(), grow=False)
    with pytest.raises(NotSupported, match="the data plane of s3 cannot grow") as err:
        decide.volume_resize(st, {"name": "v", "size": NEW})
    assert err.value.field == "name"


class GrowingDataPlane(NoDataPlane):
    """The witness data plane with the kernel's mirror caps and the calls a grow makes recorded
    (md and the kernel target cannot run on this host: the lab runs the real ones)."""

    mirror_caps = MirrorCaps(8 * MiB, views=True, write_freeze=True, superblock=True, grow=True)

    def __init__(self, remotes: list[RemoteInfo]) -> None:
        self.remotes = remotes
        self.calls: list[str] = []

    def resize_volume(self, pool_id: str, vol_id: str, size_bytes: int) -> Any:
        self.calls.append(f"lv {size_bytes}")

    def list_remotes(self) -> list[RemoteInfo]:
        return self.remotes

    def rescan_remote(self, nqn: str, min_bytes: int) -> str:
        self.calls.append(f"rescan {min_bytes}")
        return "/dev/nvme1n1"

    def grow_mirror(self, mirror_id: str, size_bytes: int) -> MirrorInfo:
        self.calls.append(f"md {size_bytes}")
        return MirrorInfo(mirror_id, "/dev/md/x", size_bytes, False, (), "clean", "idle")

    def revalidate_export(self, nqn: str) -> None:
        self.calls.append("revalidate")


def test_a_grow_interrupted_on_the_primary_is_finished_at_start(tmp_path: Path) -> None:
    """kill -9 after the intent (or at any crash point of it): recovery rolls the grow forward,
    every step again (each is idempotent), and the record ends ready at the new size."""
    st = grown_map()
    rec = dict(ready(st, 2)["v"], size_bytes=OLD, device="/dev/md/x", state="resizing")
    store = Store(tmp_path / "node", dbs=NODE_DBS)
    try:
        with store.write() as txn:
            txn.put("volumes", "v", rec)
            Ops.begin(txn, "volume.resize", {"name": "v", "size_bytes": NEW, "phase": "primary"})
        dp = GrowingDataPlane([RemoteInfo(names.replica_nqn(UUID, "1"), None, "live", "/dev/nvme1n1", None)])

        async def direct(fn: Any, *args: Any) -> Any:
            return fn(*args)

        report = asyncio.run(Ops(store, dp, direct, lambda: ()).recover())
        assert [(r["op"], r["action"], r["result"]) for r in report] == [("volume.resize", "forward", "ok")]
        leg = NEW + 8 * MiB
        assert dp.calls == [f"lv {leg}", f"rescan {leg}", f"md {NEW}", "revalidate"]
        with store.read() as txn:
            got = txn.get("volumes", "v")
            assert [v for _, v in txn.items("intents")] == []
        assert got["state"] == "ready" and got["size_bytes"] == got["front_bytes"] == NEW
    finally:
        store.close()
