"""The rolling cluster upgrade as the leader decides it (nodeos/update/rolling.py) and the map
applies it (nodeos/cluster/upgrade_map.py), over the real ClusterMap and the real planned-move
logic of `node drain` (failover.drain_commands). A small world plays the nodes: a node handed
the update reboots with another boot id on the new release (or, broken, on the old one).

What an operator relies on: the checks refuse a cluster that is not ready and name why; one
failure domain at a time, the leader's last; every primary off a domain before its nodes are
updated, and replicas in sync before the next domain; a node back on the old release stops the
upgrade naming it; pause, resume and abort; and a leader killed after any step (its successor
decides again from the map, and a step proposed twice applies once) ends the same."""

from __future__ import annotations

from typing import Any

import pytest

from nodeos.cluster.map import encode_command
from nodeos.cluster.upgrade_map import handing_over
from nodeos.storage import failover
from nodeos.storage.failover_map import released_nodes
from nodeos.update import rolling

from ..storage.test_storage_map import M, cluster, create

OLD, NEW = "0.5.0", "0.6.0"
SHA = "ab" * 32


class World:
    """Three storage nodes on racks a, b, c (voters 1-3), a 2-replica and a 3-replica volume.
    `level`: the cluster's feature level (5: no release step; 6: `upgrade_step` v2, `release`)."""

    def __init__(self, gate_fails: int | None = None, level: int = 5) -> None:
        self.rebooting: set[int] = set()  # rebooted since the last reports: still resyncing after them
        self.lagging: set[int] = set()  # nodes whose replicas are not in sync (rebooted, resyncing)
        self.m: M = cluster(3)
        for nid, rack in ((1, "a"), (2, "b"), (3, "c")):
            self.m.ok("node_label", node_id=nid, set={"rack": rack})
            self.m.ok("node_update", node_id=nid, release=OLD, knows_level=level)
        if level > 5:
            self.m.ok("set_feature_level", level=level)
        self.v2 = create(self.m, "two", 1, 2)
        self.v3 = create(self.m, "three", 2, 3, 1)
        self.sync_all()
        self.leader = 3
        self.voters = [1, 2, 3]
        self.boot = {n: f"boot-{n}-0" for n in (1, 2, 3)}
        self.release = {n: OLD for n in (1, 2, 3)}
        self.gate_fails = gate_fails
        self.acts: list[str] = []

    @property
    def st(self) -> dict[str, Any]:
        return self.m.st

    def sync_all(self) -> None:
        """Every node's agent reports its replicas: in sync, and a primary asked to hand over
        says it did; a primary cut the legs of released nodes (its leg watch does at once)."""
        reps: dict[int, dict[str, Any]] = {1: {}, 2: {}, 3: {}}
        released = released_nodes(self.st)
        for uuid in (self.v2, self.v3):
            vol = self.st["volumes"][uuid]
            nodes = [s["node"] for s in vol["placement"]]
            for n in nodes:
                rep: dict[str, Any] = {"state": "in-sync", "epoch": vol["epoch"]}
                if n == vol["primary"]:
                    rep["members"] = {
                        o: "missing" if o in self.lagging | released else "in-sync" for o in nodes if o != n
                    }
                    if vol.get("handoff"):
                        rep["handed_off"] = vol["epoch"]
                reps[n][uuid] = rep
        for n, replicas in reps.items():
            self.m.report(n, replicas=replicas)
        self.lagging = {n for n in self.lagging if n in self.rebooting}  # resynced by the next report
        self.rebooting = set()

    def start(self) -> str:
        uid = "u1"
        doms = rolling.domains(self.st, self.voters, self.leader)
        bundle = {"sha256": SHA, "size": 10, "source": self.leader}
        self.m.ok("upgrade_start", id=uid, version=NEW, bundle=bundle, domains=doms)
        return uid

    def seen(self) -> dict[int, dict[str, Any]]:
        return {
            n: {"boot_id": self.boot[n], "release": self.release[n]}
            for n in (1, 2, 3)
            if n not in self.rebooting
        }

    def propose_step(self, args: dict[str, Any], v: int) -> Any:
        """`upgrade_step` at version `v`, as the leader's loop proposes it."""
        self.m.i += 1
        out = self.m.m.apply(self.m.i, encode_command("upgrade_step", args, v))
        assert "error" not in out, out
        return out["result"]

    def step(self) -> rolling.Act:
        """One decision and its effect, as the leader's loop and the nodes would."""
        act = rolling.decide(self.st, self.leader, self.seen())
        self.acts.append(act.kind)
        if act.kind == "step":
            assert act.args is not None
            self.propose_step(dict(act.args), act.v)
        elif act.kind == "send":
            nid = int(act.node or 0)
            assert not any(self.st["volumes"][u]["primary"] == nid for u in (self.v2, self.v3))
            up = self.st["upgrade"]
            args = {"id": up["id"], "at": up["at"], "step": "update", "to_at": up["at"], "to_step": "update"}
            self.propose_step({**args, "sent": {nid: self.boot[nid]}}, rolling.step_version(self.st))
            self.boot[nid] = self.boot[nid][:-1] + str(int(self.boot[nid][-1]) + 1)
            self.lagging.add(nid)  # its legs missed writes while it rebooted
            self.rebooting.add(nid)
            self.sync_all()
            self.release[nid] = OLD if nid == self.gate_fails else NEW
        elif act.kind == "transfer":
            dom = set(self.st["upgrade"]["domains"][self.st["upgrade"]["at"]]["nodes"])
            self.leader = next(v for v in self.voters if v not in dom)
        elif act.kind == "wait":
            for cmd, args in failover.drain_commands(self.st):  # the failover loop's planned moves
                self.m.ok(cmd, **args)
            self.sync_all()  # agents report: handed off, legs in sync again
        elif act.kind == "stop":
            self.m.ok("upgrade_state", id=self.st["upgrade"]["id"], state="stopped", reason=act.reason)
        elif act.kind == "finish":
            self.m.ok("upgrade_state", id=self.st["upgrade"]["id"], state="done")
        return act

    def run(self, limit: int = 200) -> None:
        for _ in range(limit):
            if self.st["upgrade"]["state"] != "running":
                return
            self.step()
        raise AssertionError(f"the upgrade did not end: {self.st['upgrade']}")


def test_the_checks_name_what_keeps_the_cluster_from_upgrading() -> None:
    w = World()
    assert rolling.precheck(w.st, NEW, w.voters) == []
    w.m.ok("node_health", node_id=2, health="down", reason="test")
    w.m.ok("node_set_state", node_id=1, state="draining")
    problems = rolling.precheck(w.st, OLD, w.voters)
    assert any("node s2 is down" in p for p in problems)
    assert any("node s1 is draining" in p for p in problems)
    assert any("runs 0.5.0, not older than 0.5.0" in p for p in problems)
    assert rolling.precheck(w.st, OLD, [1], allow_downgrade=True) != []  # s2 down still
    w2 = World()
    w2.m.ok("add_node", node_id=4, name="s4", addresses={"peer": "10.0.0.4:7000"})
    w2.m.ok("node_label", node_id=4, set={"rack": "b"})
    w2.m.ok("node_label", node_id=2, set={"rack": "a"})  # voters 1 and 2 now share rack a
    assert any("holds 2 of the 3 voters" in p for p in rolling.precheck(w2.st, NEW, w2.voters))


def test_one_domain_at_a_time_the_leaders_last_primaries_moved_first() -> None:
    w = World()
    doms = [d["name"] for d in rolling.domains(w.st, w.voters, w.leader)]
    assert doms == ["rack=a", "rack=b", "rack=c"]  # every rack holds a voter; the leader's (c) last
    assert [d["name"] for d in rolling.domains(w.st, w.voters, 1)] == ["rack=b", "rack=c", "rack=a"]
    w.start()
    seen_handover: set[int] = set()
    for _ in range(200):
        up = w.st["upgrade"]
        if up["state"] != "running":
            break
        if up["at"] < 3:
            nodes = up["domains"][up["at"]]["nodes"]
            # Only the current domain is taken down.
            assert {n for n in (1, 2, 3) if handing_over(w.st, n)} <= set(nodes)
            if up["step"] in ("update", "rejoin"):
                seen_handover |= set(nodes)
                assert rolling.primaries_on(w.st, nodes) == []
        before = up["at"]
        w.step()
        if w.st["upgrade"]["at"] != before:  # on to the next domain: this one's replicas in sync
            assert rolling.out_of_sync(w.st, up["domains"][before]["nodes"]) == []
    up = w.st["upgrade"]
    assert up["state"] == "done" and w.release == {1: NEW, 2: NEW, 3: NEW}
    assert seen_handover == {1, 2, 3}
    assert "transfer" in w.acts and w.leader != 3  # the leader moved off rack c before its update
    assert not any(handing_over(w.st, n) for n in (1, 2, 3))
    assert all(w.st["volumes"][u]["handoff"] is None for u in (w.v2, w.v3))


def test_a_node_back_on_its_old_release_stops_the_upgrade_naming_it() -> None:
    w = World(gate_fails=1)
    w.start()
    w.run()
    up = w.st["upgrade"]
    assert up["state"] == "stopped"
    assert "node s1 came back on 0.5.0, not 0.6.0" in up["reason"] and "old slot" in up["reason"]
    assert w.release == {1: OLD, 2: OLD, 3: OLD}  # nothing else was touched
    assert not any(handing_over(w.st, n) for n in (1, 2, 3))  # its primaries may come back
    assert w.m.do("upgrade_start", id="u2", version=NEW, bundle={"sha256": SHA, "size": 1, "source": 1},
                  domains=[{"name": "x", "nodes": [1]}])["error"]["field"] == "upgrade"  # fmt: skip
    w.m.ok("upgrade_state", id="u1", state="aborted")
    assert w.st["upgrade"]["state"] == "aborted"


def test_pause_resume_and_abort() -> None:
    """A pause during the hand-over withdraws a planned move not yet done (its primary would
    stay fenced otherwise); resume goes on to the end."""
    w = World()
    w.start()
    w.step()
    assert w.st["volumes"][w.v2]["handoff"] is not None  # asked to hand over, not yet failed over
    w.m.ok("upgrade_state", id="u1", state="paused")
    assert w.st["volumes"][w.v2]["handoff"] is None
    assert rolling.decide(w.st, w.leader, w.seen()).kind == "wait"
    assert not any(handing_over(w.st, n) for n in (1, 2, 3))
    bad = w.m.do("upgrade_state", id="u1", state="done")
    assert bad["error"]["field"] == "state" and bad["error"]["allowed"] == ["running", "aborted"]
    assert w.m.do("upgrade_state", id="nope", state="running")["error"]["field"] == "id"
    w.m.ok("upgrade_state", id="u1", state="running")
    w.run()
    assert w.st["upgrade"]["state"] == "done"


@pytest.mark.parametrize("kill_after", range(1, 40))
def test_a_leader_killed_after_any_step_leaves_the_same_end(kill_after: int) -> None:
    """After `kill_after` acts the leader dies having proposed its last step (or not): its
    successor decides from the map alone, and the step proposed again applies once."""
    w = World()
    w.start()
    for _ in range(kill_after):
        if w.st["upgrade"]["state"] != "running":
            break
        act = w.step()
    else:
        if act.kind == "step":  # the dead leader's step, proposed again by its successor
            assert act.args is not None
            assert w.propose_step(dict(act.args), act.v)["changed"] is False
        w.leader = next(v for v in w.voters if v != w.leader)
    w.run()
    assert w.st["upgrade"]["state"] == "done" and w.release == {1: NEW, 2: NEW, 3: NEW}
    assert [h for h in w.st["upgrade"]["history"] if "upgraded, every replica in sync" in h] == [
        f"rack={r}: upgraded, every replica in sync" for r in "abc"
    ]


def test_a_node_of_another_domain_down_stops_the_upgrade_before_it_takes_a_domain_down() -> None:
    w = World()
    w.start()
    w.m.ok("node_health", node_id=3, health="down", reason="test")
    act = rolling.decide(w.st, w.leader, w.seen())
    assert act.kind == "stop" and act.reason == "node s3 is down: rack=a is not taken down too"
