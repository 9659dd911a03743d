"""The failover map's epoch rules the simulator does not reach (tests/sim/test_sim_broken_checks.py
says why), and the stale hand-over it found."""

from __future__ import annotations

import copy
import random
from typing import Any

from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.storage import failover
from nodeos.storage.failover_map import handed_off, settle_in_sync
from nodeos_devtools.sim.failover_sim import build_map


def _volume_back_on_its_old_primary() -> tuple[ClusterMap, dict[str, Any], list[int]]:
    """A 3-replica volume: primary 1 at epoch 1, moved away and back (epoch 3); node 1's report
    in the map is still the one it made as primary at epoch 1 (node 3 in sync, handed off)."""
    m, vols = build_map(3, random.Random(1))
    vol = next(m.state["volumes"][u] for u in vols if len(m.state["volumes"][u]["placement"]) == 3)
    nodes = [s["node"] for s in vol["placement"]]
    rep = m.state["reports"][nodes[0]]["replicas"][vol["uuid"]]
    rep.update(epoch=1, members={nodes[1]: "in-sync", nodes[2]: "in-sync"}, handed_off=1)
    vol.update(primary=nodes[0], epoch=3, in_sync=nodes[:2], handoff={"to": nodes[1], "epoch": 3})
    return m, vol, nodes


def test_a_primarys_report_of_an_older_epoch_changes_no_in_sync_set() -> None:
    m, vol, nodes = _volume_back_on_its_old_primary()
    settle_in_sync(m.state, vol)
    assert vol["in_sync"] == nodes[:2]  # node 3 was in sync at epoch 1; that says nothing now


def test_a_hand_over_of_an_older_epoch_is_not_taken_for_this_one() -> None:
    m, vol, nodes = _volume_back_on_its_old_primary()
    m.state["nodes"][nodes[0]]["state"] = "draining"
    assert not handed_off(m.state, vol)
    assert failover.drain_commands(m.state) == []  # the failover waits for epoch 3's hand-over


def test_a_hand_over_decided_before_an_undrain_is_refused_at_apply() -> None:
    # The failover simulator (drain mix, seed 11 when found): volume_handoff decided while the
    # node drained, applied after `node_set_state active`; nothing withdrew it and the controller
    # never finished it, so the primary stayed fenced for good.
    m, vols = build_map(3, random.Random(1))
    vol = m.state["volumes"][vols[0]]
    prim, to = vol["primary"], vol["placement"][1]["node"]
    index = m.state["applied_index"]

    def apply(cmd: str, args: dict[str, Any]) -> dict[str, Any]:
        nonlocal index
        index += 1
        return m.apply(index, encode_command(cmd, args))

    apply("node_set_state", {"node_id": prim, "state": "draining"})
    decided = failover.drain_commands(m.state)
    assert decided == [("volume_handoff", {"uuid": vol["uuid"], "epoch": vol["epoch"], "to": to})]
    apply("node_set_state", {"node_id": prim, "state": "active"})
    out = apply(*decided[0])
    assert "error" in out and "no longer needs to hand" in str(out["error"])
    assert vol.get("handoff") is None
    again = copy.deepcopy(m)  # while it drains, the same hand-over applies
    again.apply(index + 1, encode_command("node_set_state", {"node_id": prim, "state": "draining"}))
    assert "error" not in again.apply(index + 2, encode_command(*decided[0]))
