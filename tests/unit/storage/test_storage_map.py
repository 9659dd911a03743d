"""The storage sections of the cluster map: what an operator's commands and the agents'
reports do to pools, volumes, snapshots, hosts and grants; determinism under random
command sequences (with snapshot/restore in between), and the map's own invariants."""

from __future__ import annotations

import random
from typing import Any

import pytest

from nodeos.cluster import events as map_events
from nodeos.cluster.map import ClusterMap, encode_command

GiB = 1 << 30


class M:
    """A map and a log index, with helpers that read like an operator's session."""

    def __init__(self) -> None:
        self.m = ClusterMap()
        self.i = 0

    def do(self, cmd: str, **args: Any) -> dict[str, Any]:
        self.i += 1
        return self.m.apply(self.i, encode_command(cmd, args))

    def ok(self, cmd: str, **args: Any) -> Any:
        out = self.do(cmd, **args)
        assert "error" not in out, out
        return out["result"]

    @property
    def st(self) -> dict[str, Any]:
        return self.m.state

    def report(self, nid: int, **parts: Any) -> None:
        seq = (self.st["reports"].get(nid) or {}).get("seq", 0) + 1
        self.ok("node_report", node_id=nid, seq=seq, dataplane={"name": "kernel"}, **parts)


def cluster(n: int = 3) -> M:
    m = M()
    for nid in range(1, n + 1):
        m.ok("add_node", node_id=nid, name=f"s{nid}", addresses={"peer": f"10.0.0.{nid}:7000"})
        m.ok("pool_create", node_id=nid, name="p", pool_id=f"pool{nid}", drives=["d1"], devices=["/dev/x"])
        m.report(
            nid, pools={f"pool{nid}": {"state": "ready", "size_bytes": 100 * GiB, "free_bytes": 100 * GiB}}
        )
    return m


def placement(*nodes: int) -> list[dict[str, Any]]:
    return [{"node": n, "pool_id": f"pool{n}"} for n in nodes]


def create(m: M, name: str, *nodes: int, uuid: str | None = None) -> str:
    uuid = uuid or f"u-{name}"
    m.ok(
        "volume_create",
        uuid=uuid,
        name=name,
        nqn=f"nqn.x:{uuid}",
        size_bytes=GiB,
        placement=placement(*nodes),
    )
    return uuid


def test_pool_becomes_ready_when_its_node_reports_it() -> None:
    m = M()
    m.ok("add_node", node_id=1, name="s1")
    m.ok("pool_create", node_id=1, name="p", pool_id="pool1", drives=["d1"], devices=["/dev/x"])
    assert m.st["pools"]["1/p"]["state"] == "creating"
    m.report(1, pools={"pool1": {"state": "ready", "size_bytes": 5 * GiB, "free_bytes": 5 * GiB}})
    assert m.st["pools"]["1/p"]["state"] == "ready" and m.st["pools"]["1/p"]["size_bytes"] == 5 * GiB
    # the same drive cannot go into a second pool of that node
    assert (
        m.do("pool_create", node_id=1, name="q", pool_id="pool2", drives=["d1"], devices=["/dev/x"])["error"][
            "field"
        ]
        == "drives"
    )


def test_volume_is_ready_only_when_every_replica_is_in_sync() -> None:
    m = cluster()
    uuid = create(m, "v", 1, 2, 3)
    vol = m.st["volumes"][uuid]
    assert vol["state"] == "creating" and vol["primary"] == 1 and vol["epoch"] == 1
    assert m.st["paths"][uuid] == {1: "optimized", 2: "inaccessible", 3: "inaccessible"}
    m.report(1, replicas={uuid: {"state": "in-sync"}})
    m.report(2, replicas={uuid: {"state": "in-sync"}})
    assert vol["state"] == "creating"
    m.report(3, replicas={uuid: {"state": "creating", "step": "volume.create"}})
    assert vol["state"] == "creating"
    m.report(3, replicas={uuid: {"state": "in-sync"}})
    assert vol["state"] == "ready"


def test_a_failed_replica_fails_the_create_naming_node_and_step() -> None:
    m = cluster()
    uuid = create(m, "v", 1, 2)
    m.report(2, replicas={uuid: {"state": "failed", "step": "volume.create", "error": "lvcreate: no space"}})
    vol = m.st["volumes"][uuid]
    assert vol["state"] == "failed"
    assert "s2" in vol["error"] and "volume.create" in vol["error"] and "no space" in vol["error"]


def test_placement_is_rechecked_at_apply() -> None:
    m = cluster()
    bad = [
        (placement(1, 1), "two replicas"),
        ([{"node": 1, "pool_id": "pool2"}], "not a ready pool"),
        (placement(1, 2, 3, 1), "1 to 3"),
        ([], "1 to 3"),
    ]
    for pl, why in bad:
        out = m.do("volume_create", uuid="x", name="x", nqn="n", size_bytes=GiB, placement=pl)
        assert why in out["error"]["message"]
    assert m.st["volumes"] == {} and m.st["names"] == {}


def test_spread_is_rechecked_at_apply_with_the_labels_as_applied() -> None:
    # Found by the simulator's map workload: `volume create --spread rack` decided while a
    # `node label` was in flight; by the time it applied, two replicas shared a rack.
    m = cluster()
    for nid, rack in ((1, "a"), (2, "b"), (3, "c")):
        m.ok("node_label", node_id=nid, set={"rack": rack})
    m.ok("node_label", node_id=3, set={"rack": "b"})  # committed between decision and apply
    out = m.do(
        "volume_create",
        uuid="u",
        name="v",
        nqn="n",
        size_bytes=GiB,
        spread="rack",
        placement=placement(1, 2, 3),
    )
    assert out["error"]["field"] == "placement" and "rack 'b'" in out["error"]["message"]
    assert m.st["volumes"] == {} and m.st["names"] == {}
    bad = m.do(
        "volume_create", uuid="u", name="v", nqn="n", size_bytes=GiB, spread="row", placement=placement(1)
    )
    assert bad["error"]["field"] == "spread" and bad["error"]["allowed"] == ["node", "rack", "switch"]
    # by node the same nodes are fine; a node without the label is a rack of its own
    m.ok(
        "volume_create",
        uuid="u",
        name="v",
        nqn="n",
        size_bytes=GiB,
        spread="node",
        placement=placement(1, 2, 3),
    )
    m.ok("node_label", node_id=3, remove=["rack"])
    m.ok(
        "volume_create", uuid="w", name="w", nqn="n", size_bytes=GiB, spread="rack", placement=placement(2, 3)
    )


def test_names_are_one_space_for_volumes_and_snapshots() -> None:
    m = cluster()
    uuid = create(m, "v", 1)
    m.report(1, replicas={uuid: {"state": "in-sync"}})
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    out = m.do("volume_create", uuid="u2", name="snap", nqn="n", size_bytes=GiB, placement=placement(2))
    assert out["error"]["code"] == "already_exists"


def test_delete_drops_the_volume_once_no_node_reports_it() -> None:
    m = cluster()
    uuid = create(m, "v", 1, 2)
    m.report(1, replicas={uuid: {"state": "in-sync"}})
    m.report(2, replicas={uuid: {"state": "in-sync"}})
    m.ok("volume_delete", name="v")
    assert m.st["volumes"][uuid]["state"] == "deleting"
    m.report(1, replicas={})
    assert uuid in m.st["volumes"]  # node 2 still has its replica
    m.report(2, replicas={})
    assert uuid not in m.st["volumes"] and "v" not in m.st["names"] and uuid not in m.st["paths"]


def test_a_delete_does_not_wait_for_a_node_that_is_down() -> None:
    # Down after the others finished: its being called down finishes the delete.
    m = cluster()
    uuid = create(m, "v", 1, 2)
    m.report(1, replicas={uuid: {"state": "in-sync"}})
    m.report(2, replicas={uuid: {"state": "in-sync"}})
    m.ok("volume_delete", name="v")
    m.report(1, replicas={})
    assert uuid in m.st["volumes"]  # node 2 is up and still has its replica: waited for
    m.ok("node_health", node_id=2, health="down", reason="lease expired")
    assert uuid not in m.st["volumes"] and "v" not in m.st["names"]
    gone = [e for e in map_events.list_events(m.st) if e["kind"] == "volume_deleted"]
    assert "s2 (down) deletes its copy when it returns" in gone[-1]["message"]
    # Down before: the last node that is up finishing drops it.
    uuid = create(m, "w", 1, 3)
    m.report(1, replicas={uuid: {"state": "in-sync"}})
    m.report(3, replicas={uuid: {"state": "in-sync"}})
    m.ok("volume_delete", name="w")
    m.ok("node_health", node_id=3, health="down", reason="lease expired")
    assert uuid in m.st["volumes"]  # node 1, up, has not deleted yet
    m.report(1, replicas={})
    assert uuid not in m.st["volumes"]
    # Back up, the node still reports the old replica: nothing of it returns to the map.
    m.ok("node_health", node_id=3, health="up", reason="renewed")
    m.report(3, replicas={uuid: {"state": "in-sync"}})
    assert uuid not in m.st["volumes"] and "w" not in m.st["names"]


def test_grants_need_registered_hosts_and_hosts_with_grants_stay() -> None:
    m = cluster()
    create(m, "v", 1)
    h = "nqn.2014-08.com.example:h1"
    assert m.do("volume_hosts", name="v", host=h, add=True)["error"]["field"] == "host"
    m.ok("host_add", nqn=h, dhchap_secret=None)
    assert m.ok("volume_hosts", name="v", host=h, add=True)["changed"] is True
    assert m.ok("volume_hosts", name="v", host=h, add=True)["changed"] is False
    assert m.do("host_remove", nqn=h)["error"]["code"] == "failed"
    m.ok("volume_hosts", name="v", host=h, add=False)
    m.ok("host_remove", nqn=h)
    assert m.st["hosts"] == {}


def test_a_fleet_is_registered_and_granted_in_one_command_each_all_or_nothing() -> None:
    m = cluster()
    create(m, "v", 1)
    fleet = [f"nqn.2014-08.com.example:gpu{i}" for i in range(200)]
    m.ok("host_add", nqn=fleet[0], dhchap_secret=None)
    out = m.ok("host_add", nqns=fleet, dhchap_secret=None)
    assert out["added"] == 199 and out["present"] == 1 and set(m.st["hosts"]) == set(fleet)
    assert m.do("host_add", nqns=fleet[:2], dhchap_secret="DHHC-1:00:x:")["error"]["field"] == "dhchap_secret"
    assert m.do("host_add", nqns=[f"nqn.h{i}" for i in range(1001)])["error"]["field"] == "hosts"

    stranger = "nqn.2014-08.com.example:unregistered"
    assert m.do("volume_hosts", name="v", hosts=[*fleet[:5], stranger], add=True)["error"]["field"] == "host"
    assert m.st["volumes"]["u-v"]["hosts"] == []  # all or nothing
    assert m.ok("volume_hosts", name="v", hosts=fleet[:1], add=True)["changed"] == 1
    assert m.ok("volume_hosts", name="v", hosts=fleet, add=True)["changed"] == 199
    assert m.st["volumes"]["u-v"]["hosts"] == fleet
    granted = [e for e in m.st["events"]["log"] if e["kind"] == "host_granted"]
    assert len(granted) == 200  # one event per host, as one at a time would give
    assert m.do("volume_hosts", name="v", hosts=[fleet[0], stranger], add=False)["error"]["field"] == "host"
    m.ok("volume_hosts", name="v", hosts=fleet[:150], add=False)
    assert m.st["volumes"]["u-v"]["hosts"] == fleet[150:]


def test_a_snapshot_that_failed_is_dropped_and_its_name_freed() -> None:
    m = cluster()
    uuid = create(m, "v", 1)
    m.report(1, replicas={uuid: {"state": "in-sync"}})
    m.ok("snapshot_create", uuid="s-1", name="snap", volume="v")
    m.report(1, replicas={uuid: {"state": "in-sync"}}, snapshots={"s-1": {"state": "failed", "error": "x"}})
    assert "s-1" not in m.st["snapshots"] and "snap" not in m.st["names"]


def test_pool_delete_is_refused_while_used_and_done_when_the_node_drops_it() -> None:
    m = cluster()
    uuid = create(m, "v", 1)
    assert "still holds v" in m.do("pool_delete", node_id=1, name="p")["error"]["message"]
    m.ok("volume_delete", name="v")
    m.report(1, replicas={}, pools={"pool1": {"state": "ready", "size_bytes": 1, "free_bytes": 1}})
    assert uuid not in m.st["volumes"]
    m.ok("pool_delete", node_id=1, name="p")
    assert m.st["pools"]["1/p"]["state"] == "deleting"
    m.report(1, pools={})
    assert "1/p" not in m.st["pools"]


def test_import_of_single_node_records_is_idempotent() -> None:
    m = M()
    m.ok("add_node", node_id=7, name="s7")
    rec = {
        "node_id": 7,
        "pools": [
            {"name": "p1", "pool_id": "pabc", "drives": ["d"], "devices": ["/dev/n"], "size_bytes": GiB}
        ],
        "volumes": [
            {
                "name": "v1",
                "uuid": "u1",
                "vol_id": "vu1",
                "nqn": "nqn.x:u1",
                "nguid": "u1",
                "serial": "u1",
                "pool": "p1",
                "size_bytes": GiB,
                "kind": "volume",
                "hosts": ["nqn.h"],
            },
        ],
        "snapshots": [{"name": "s1", "uuid": "su1", "snap_id": "ssu1", "volume": "v1", "size_bytes": GiB}],
        "hosts": [{"nqn": "nqn.h", "dhchap_secret": None}],
    }
    first = m.ok("import_node", **rec)
    assert first["volumes"] == ["v1"] and first["snapshots"] == ["s1"] and first["hosts"] == ["nqn.h"]
    before = m.m.snapshot()
    second = m.ok("import_node", **rec)
    assert second == {"pools": [], "volumes": [], "snapshots": [], "hosts": [], "skipped": []}
    m.m.state["applied_index"] -= 1  # only the index moved
    assert m.m.snapshot() == before
    vol = m.st["volumes"]["u1"]
    assert (
        vol["state"] == "ready"
        and vol["hosts"] == ["nqn.h"]
        and vol["placement"] == [{"node": 7, "pool_id": "pabc"}]
    )


def test_labels_set_and_removed_and_bad_labels_refused() -> None:
    m = cluster(1)
    m.ok("node_label", node_id=1, set={"rack": "a", "switch": "sw1"})
    m.ok("node_label", node_id=1, set={"rack": "b"}, remove=["switch"])
    assert m.st["nodes"][1]["labels"] == {"rack": "b"}
    for bad in ({"Rack": "a"}, {"rack": ""}, {"rack": "a b"}):
        assert m.do("node_label", node_id=1, set=bad)["error"]["field"] == "labels"
    assert m.st["nodes"][1]["labels"] == {"rack": "b"}


def test_version_1_snapshot_is_read_with_empty_storage_sections() -> None:
    import msgpack

    old = {"schema": 1, "cluster_id": "c", "applied_index": 9, "nodes": {1: {"id": 1, "name": "n"}}, "kv": {}}
    m = ClusterMap()
    m.restore(msgpack.packb(old))
    assert m.state["schema"] == 2 and m.state["volumes"] == {} and m.state["nodes"][1]["labels"] == {}


# --- random command sequences: determinism and invariants -----------------------------------------


def _random_commands(rng: random.Random, n: int) -> list[bytes]:
    cmds: list[bytes] = []
    names = ["a", "b", "c", "d"]
    for _ in range(n):
        k = rng.randrange(10)
        nm = rng.choice(names)
        nodes = rng.sample([1, 2, 3, 4], rng.randint(0, 4))
        if k == 0:
            cmds.append(
                encode_command(
                    "volume_create",
                    {
                        "uuid": f"u{rng.randrange(6)}",
                        "name": nm,
                        "nqn": "n",
                        "size_bytes": GiB,
                        "placement": placement(*nodes)
                        if rng.random() < 0.9
                        else [{"node": 1, "pool_id": "zz"}],
                    },
                )
            )
        elif k == 1:
            cmds.append(encode_command("volume_delete", {"name": nm}))
        elif k == 2:
            nid = rng.randint(1, 4)
            reps = {
                f"u{i}": {
                    "state": rng.choice(["in-sync", "creating", "failed"]),
                    "frozen": rng.choice([None, "s0", "s1", "s2"]),
                }
                for i in range(6)
                if rng.random() < 0.4
            }
            snaps = {
                f"s{i}": {"state": rng.choice(["ready", "failed"])} for i in range(3) if rng.random() < 0.3
            }
            cmds.append(
                encode_command(
                    "node_report",
                    {
                        "node_id": nid,
                        "seq": rng.randint(1, 40),
                        "replicas": reps,
                        "snapshots": snaps,
                        "pools": {f"pool{nid}": {"state": "ready", "size_bytes": GiB, "free_bytes": GiB}},
                    },
                )
            )
        elif k == 3:
            cmds.append(
                encode_command(
                    "snapshot_create",
                    {"uuid": f"s{rng.randrange(3)}", "name": nm, "volume": rng.choice(names)},
                )
            )
        elif k == 4:
            cmds.append(encode_command("host_add", {"nqn": f"nqn.h{rng.randrange(3)}"}))
        elif k == 5:
            cmds.append(
                encode_command(
                    "volume_hosts",
                    {"name": nm, "host": f"nqn.h{rng.randrange(3)}", "add": rng.random() < 0.7},
                )
            )
        elif k == 6:
            cmds.append(encode_command("host_remove", {"nqn": f"nqn.h{rng.randrange(3)}"}))
        elif k == 7:
            cmds.append(encode_command("snapshot_delete", {"name": nm, "force": rng.random() < 0.5}))
        elif k == 8:
            cmds.append(encode_command("snapshot_abort", {"uuid": f"s{rng.randrange(3)}"}))
        else:
            cmds.append(
                encode_command("volume_create", {"uuid": f"u{rng.randrange(6)}", "name": nm})
            )  # bad args
    return cmds


def _invariants(st: dict[str, Any]) -> None:
    for name, ref in st["names"].items():
        obj = (st["volumes"] if ref["kind"] == "volume" else st["snapshots"])[ref["uuid"]]
        assert obj["name"] == name
    named = {(r["kind"], r["uuid"]) for r in st["names"].values()}
    assert {("volume", u) for u in st["volumes"]} | {("snapshot", u) for u in st["snapshots"]} == named
    assert set(st["paths"]) == set(st["volumes"])
    for v in st["volumes"].values():
        nodes = [s["node"] for s in v["placement"]]
        assert len(set(nodes)) == len(nodes) and v["primary"] in nodes
        assert st["paths"][v["uuid"]] == {
            n: "optimized" if n == v["primary"] else "inaccessible" for n in nodes
        }
        assert all(h in st["hosts"] for h in v["hosts"])
        if v.get("freeze"):  # only for a snapshot of it still being taken
            snap = st["snapshots"][v["freeze"]]
            assert snap["volume"] == v["uuid"] and snap["state"] == "creating" and snap["phase"]


@pytest.mark.parametrize("seed", range(40))
def test_random_command_sequences_apply_identically_and_keep_invariants(seed: int) -> None:
    rng = random.Random(seed)
    base = cluster(4)
    setup = base.m.snapshot()
    cmds = _random_commands(rng, 120)
    a, b = ClusterMap(), ClusterMap()
    a.restore(setup)
    b.restore(setup)
    cut = rng.randrange(len(cmds))
    start = base.i + 1
    for i, c in enumerate(cmds):
        ra = a.apply(start + i, c)
        if i == cut:  # b goes through a snapshot/restore in the middle, like a follower catching up
            snap = b.snapshot()
            b = ClusterMap()
            b.restore(snap)
        rb = b.apply(start + i, c)
        assert ra == rb
        _invariants(a.state)
    assert a.snapshot() == b.snapshot()


def test_a_report_records_the_same_events_whatever_the_order_of_the_pools() -> None:
    # Every node applies the report to its own map, whose dicts may be in another order (one
    # read back from a snapshot): two pools made ready by one report must be recorded in the
    # same order everywhere. Found by the simulator's map workload (seed 30: map divergence).
    from nodeos.cluster import events as map_events
    from nodeos_devtools.sim.node import reverse_dict_order

    def events(flip: bool) -> list[str]:
        m = M()
        m.ok("add_node", node_id=1, name="s1")
        for k in ("p1", "p0"):
            m.ok("pool_create", node_id=1, name=k, pool_id=f"id-{k}", drives=[k], devices=["/dev/x"])
        if flip:
            m.m.state = reverse_dict_order(m.m.state)
        mark = map_events.last_seq(m.st)
        ready = {"state": "ready", "size_bytes": GiB, "free_bytes": GiB}
        m.report(1, pools={"id-p0": ready, "id-p1": ready})
        return [e["message"] for e in map_events.list_events(m.st, mark)]

    assert events(False) == events(True)
