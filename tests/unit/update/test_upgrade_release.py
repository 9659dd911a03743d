"""The rolling upgrade releases a domain's replicas before its update (feature level 6,
`upgrade_step` v2, step `release`): over the real ClusterMap, the World of test_rolling.py.

What an operator relies on: before a node is handed its update, it is out of every in-sync set
(an event says "released for its update") and every primary has cut its legs, so its reboot
blocks no write; while released it is not counted in sync again, whatever is reported; when the
domain is back on the new release the release ends and the `sync` step waits for its replicas
to be in sync again; a pause, a stop or an abort ends a release, a resume releases again before
any update is handed over; a leader killed after any step
ends the same; a cluster below level 6 goes on without the step, as before."""

from __future__ import annotations

from typing import Any

import pytest

from nodeos.cluster import events
from nodeos.storage.failover_map import in_sync_of, released_nodes
from nodeos.update import rolling

from .test_rolling import NEW, World


def in_sync(w: World) -> dict[str, list[int]]:
    return {name: in_sync_of(w.st["volumes"][u]) for name, u in (("two", w.v2), ("three", w.v3))}


def to_release(w: World) -> None:
    """Steps until the first domain is released (its primaries handed over first)."""
    w.start()
    for _ in range(20):
        if w.st["upgrade"]["step"] == "release":
            return
        w.step()
    raise AssertionError(w.st["upgrade"])


def to_update(w: World) -> None:
    """Steps until the released legs are cut (the World's primaries cut them) and the step is update."""
    for _ in range(5):
        if w.st["upgrade"]["step"] == "update":
            return
        w.step()
    raise AssertionError(w.st["upgrade"])


def primary_reports(w: World, members: dict[int, str]) -> None:
    """The primaries report their mirrors with `members` (others: in sync), nothing else moves."""
    reps: dict[int, dict[str, Any]] = {}
    for u in (w.v2, w.v3):
        vol = w.st["volumes"][u]
        prim = vol["primary"]
        nodes = [s["node"] for s in vol["placement"] if s["node"] != prim]
        mem = {n: members.get(n, "in-sync") for n in nodes}
        reps.setdefault(prim, {})[u] = {"state": "in-sync", "epoch": vol["epoch"], "members": mem}
    for prim, replicas in reps.items():
        w.m.report(prim, replicas=replicas)


def test_a_domain_is_released_before_its_update_and_taken_back_after() -> None:
    w = World(level=6)
    w.start()
    sent_while: list[tuple[int, list[str], dict[str, list[int]]]] = []
    for _ in range(300):
        up = w.st["upgrade"]
        if up["state"] != "running":
            break
        if up["at"] < 3:
            nodes = up["domains"][up["at"]]["nodes"]
            if up["step"] in ("update", "rejoin"):
                assert released_nodes(w.st) == set(nodes)
                # out of every in-sync set: no write waits for their legs, none counts them
                assert all(not set(nodes) & set(s) for s in in_sync(w).values())
            if up["step"] in ("handover", "sync"):
                assert released_nodes(w.st) == set()
        act = w.step()
        if act.kind == "send":
            sent_while.append((int(act.node or 0), rolling.legs_held(w.st, [int(act.node or 0)]), in_sync(w)))
    up = w.st["upgrade"]
    assert up["state"] == "done" and w.release == {1: NEW, 2: NEW, 3: NEW}
    # Every node was handed its update only once every primary had cut its legs.
    assert [n for n, _, _ in sent_while] == [1, 2, 3]
    assert all(held == [] for _, held, _ in sent_while)
    assert in_sync(w) == {"two": [1, 2], "three": [2, 3, 1]}  # every replica in sync at the end
    assert released_nodes(w.st) == set() and up["released"] == []
    hist = up["history"]
    for rack, node in (("a", "s1"), ("b", "s2"), ("c", "s3")):
        order = [
            f"rack={rack}: primaries handed over; its replicas released for its update",
            f"rack={rack}: released legs cut by every primary",
            f"release of {node} ended: their legs are re-added and resynced",
            f"rack={rack}: upgraded, every replica in sync",
        ]
        where = [next(i for i, h in enumerate(hist) if h.startswith(o)) for o in order]
        assert where == sorted(where), hist
    out = [e for e in events.list_events(w.st) if e["kind"] == "replica_out_of_sync"]
    released = [e for e in out if e["message"].endswith("left the in-sync set (released for its update)")]
    assert {(e["node"], e["volume"]) for e in released} == {
        (1, w.v2),
        (1, w.v3),
        (2, w.v2),
        (2, w.v3),
        (3, w.v3),
    }


def test_the_release_waits_for_the_primaries_to_cut_the_legs_and_counts_none_in_sync() -> None:
    w = World(level=6)
    to_release(w)
    assert released_nodes(w.st) == {1}
    assert in_sync(w) == {"two": [2], "three": [2, 3]}  # s1 released; the primaries stay in sync
    # The primaries have not cut s1's legs yet (their report still calls them in sync): no update
    # is handed over, and the report does not make the map count s1 in sync again.
    primary_reports(w, {1: "in-sync"})
    act = rolling.decide(w.st, w.leader, w.seen())
    assert act.kind == "wait" and act.reason == "rack=a: primaries to cut the released legs of three, two"
    assert in_sync(w) == {"two": [2], "three": [2, 3]}
    primary_reports(w, {1: "missing"})  # the leg watch cut them
    act = rolling.decide(w.st, w.leader, w.seen())
    assert act.kind == "step" and act.args is not None and act.args["to_step"] == "update" and act.v == 2


def test_a_pause_stop_or_abort_ends_the_release_and_a_resume_releases_again() -> None:
    """An upgrade that waits for an operator (maybe for hours) does not leave replicas out of
    sync: the release ends, the legs come back; resumed, the domain is released again before
    any node of it is handed its update."""
    w = World(level=6)
    to_release(w)
    to_update(w)
    assert released_nodes(w.st) == {1}
    for end in ("paused", "stopped"):
        w.m.ok("upgrade_state", id="u1", state=end, reason="test")
        assert released_nodes(w.st) == set()
        primary_reports(w, {1: "syncing"})  # the primaries re-add the legs: not yet counted
        assert in_sync(w) == {"two": [2], "three": [2, 3]}
        primary_reports(w, {1: "in-sync"})
        assert in_sync(w) == {"two": [1, 2], "three": [2, 3, 1]}
        w.m.ok("upgrade_state", id="u1", state="running")
        act = rolling.decide(w.st, w.leader, w.seen())
        assert act.kind == "step" and act.args is not None and act.args["to_step"] == "release", act
        assert act.args["note"] == "rack=a: resumed: its replicas released again for its update"
        w.step()
        assert released_nodes(w.st) == {1} and in_sync(w) == {"two": [2], "three": [2, 3]}
        to_update(w)
    w.run()
    assert w.st["upgrade"]["state"] == "done" and in_sync(w) == {"two": [1, 2], "three": [2, 3, 1]}
    # Paused in the release step itself: resumed, it releases again before it waits for the cut.
    w = World(level=6)
    to_release(w)
    w.m.ok("upgrade_state", id="u1", state="paused")
    primary_reports(w, {1: "in-sync"})
    assert in_sync(w) == {"two": [1, 2], "three": [2, 3, 1]}
    w.m.ok("upgrade_state", id="u1", state="running")
    act = rolling.decide(w.st, w.leader, w.seen())
    assert (
        act.kind == "step"
        and act.args is not None
        and (act.args["step"], act.args["to_step"])
        == (
            "release",
            "release",
        )
    )
    w.step()
    assert released_nodes(w.st) == {1} and in_sync(w) == {"two": [2], "three": [2, 3]}
    w.run()
    assert w.st["upgrade"]["state"] == "done"
    # An abort ends it too, and the replicas come back.
    w = World(level=6)
    to_release(w)
    w.m.ok("upgrade_state", id="u1", state="aborted")
    assert released_nodes(w.st) == set()
    primary_reports(w, {1: "in-sync"})
    assert in_sync(w) == {"two": [1, 2], "three": [2, 3, 1]}


@pytest.mark.parametrize("kill_after", range(1, 38))  # the whole run: 35 acts
def test_a_leader_killed_after_any_step_with_the_release_leaves_the_same_end(kill_after: int) -> None:
    w = World(level=6)
    w.start()
    act: Any = None
    for _ in range(kill_after):
        if w.st["upgrade"]["state"] != "running":
            break
        act = w.step()
    else:
        if act.kind == "step":  # the dead leader's step, proposed again by its successor
            assert w.propose_step(dict(act.args), act.v)["changed"] is False
        w.leader = next(v for v in w.voters if v != w.leader)
    w.run()
    assert w.st["upgrade"]["state"] == "done" and w.release == {1: NEW, 2: NEW, 3: NEW}
    assert in_sync(w) == {"two": [1, 2], "three": [2, 3, 1]} and released_nodes(w.st) == set()
    assert sum("released legs cut by every primary" in h for h in w.st["upgrade"]["history"]) == 3


def test_below_level_6_the_upgrade_goes_on_without_the_release_as_before() -> None:
    w = World(level=5)
    w.start()
    w.run()
    up = w.st["upgrade"]
    assert up["state"] == "done" and "released" not in up
    assert not any("released" in h for h in up["history"])
    # v1 (what a 0.5.0 member applies) knows no `release` step: refused the same on every node.
    w2 = World(level=5)
    w2.start()
    bad = w2.m.do("upgrade_step", id="u1", at=0, step="handover", to_at=0, to_step="release")
    assert bad["error"]["field"] == "to_step" and "release" not in bad["error"]["allowed"]
