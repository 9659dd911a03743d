"""The node's lease keeper decides when it fences itself: without a valid lease, when the
leader called it down, and, coming out of a fence, until its own map has caught up with the
leader's at the grant (a node whose map is behind may still believe it is the primary of a
volume that was failed over: the simulator's failover workload found two writable primaries
when any grant lifted the fence)."""

from __future__ import annotations

from nodeos.agent.lease import LeaseKeeper
from nodeos.storage.failover import LeaseTiming

T = LeaseTiming(3.0)


async def _no_fence(fenced: bool) -> list[str]:
    return []


def keeper(granted_at: float | None, health: str, index: int, fenced: bool) -> LeaseKeeper:
    k = LeaseKeeper(None, _no_fence, T)
    k.granted_at, k.grant, k.fenced = granted_at, (health, index), fenced
    return k


def test_a_fresh_grant_to_a_node_that_is_up_and_caught_up_lifts_the_fence() -> None:
    assert not keeper(100.0, "up", 40, fenced=True).fence_wanted(100.5, applied=40)
    assert not keeper(100.0, "up", 40, fenced=False).fence_wanted(100.5, applied=41)


def test_no_valid_lease_fences() -> None:
    assert keeper(None, "up", 0, fenced=False).fence_wanted(5.0, applied=9)
    assert keeper(100.0, "up", 40, fenced=False).fence_wanted(100.0 + T.fence_after_s, applied=40)


def test_a_node_the_leader_calls_down_stays_fenced_though_its_renewals_are_granted() -> None:
    # Its volumes may have been failed over while it was away: it waits to be called up.
    assert keeper(100.0, "down", 40, fenced=True).fence_wanted(100.5, applied=40)
    assert keeper(100.0, "down", 40, fenced=False).fence_wanted(100.5, applied=40)


def test_a_fenced_node_whose_map_is_behind_the_grant_stays_fenced_until_it_catches_up() -> None:
    k = keeper(100.0, "up", 40, fenced=True)
    assert k.fence_wanted(100.5, applied=39)
    assert not k.fence_wanted(100.6, applied=40)
    # A serving node is not fenced because its map trails a later grant by an entry or two.
    assert not keeper(100.0, "up", 40, fenced=False).fence_wanted(100.5, applied=38)
