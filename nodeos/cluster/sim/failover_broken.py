"""Deliberately broken failover variants, for the failover workload's self-test only.

Each one puts one known bug into the real controller or map code (patched for one run) or
into the simulated agents, so tests prove the failover invariants catch it. Production code
never sets these. docs/testing.md lists what catches each.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from nodeos.cluster import failover
from nodeos.cluster import map as map_mod
from nodeos.cluster.failover_map import health_of, in_sync_of

FAILOVER_BROKEN_VARIANTS = {
    "no_lease_wait": "the leader calls a node down once one renewal is late and its Raft did not see it "
    "active at that look, not after its lease",
    "promote_out_of_sync": "the controller and volume_failover ignore the in-sync set",
    "no_self_fence": "a node whose lease ran out keeps serving as primary",
    "no_epoch_check": "replicas take writes from any primary, whatever its epoch",
    "unfence_on_any_grant": "any granted renewal lifts the fence (a node called down, its map behind)",
    "ack_on_map_view": "a primary holds writes only for the legs its map counts in-sync, not those its "
    "own reports in flight may bring back",
    "ack_degraded": "a primary acknowledges a write its mirror dropped a leg for before the map knows",
    "no_write_serialize": "the primary's md mirror leaves serialize_policy off: two writes to one block in "
    "flight on a leg together land in either order (a host's timed-out write over its retry's successor)",
    "lost_contact_is_expiry": "the leader takes a node its Raft does not see active for one whose lease ran "
    "out (called down, and its volumes failed over, before it has fenced itself)",
}

_ORIGINAL: dict[str, Any] = {
    "down_after_s": failover.LeaseTiming.down_after_s,
    "contact_s": failover.LeaseTiming.contact_s,
    "expired": failover.Leases.expired,
    "failover_target": failover.failover_target,
    "volume_failover": map_mod.HANDLERS["volume_failover"][1],
}


def _any_target(st: dict[str, Any], vol: dict[str, Any]) -> int | None:
    for slot in vol["placement"]:
        nid = slot["node"]
        if nid != vol["primary"] and health_of(st, nid) == "up":
            return int(nid)
    return None


def _failover_any(st: dict[str, Any], args: dict[str, Any]) -> Any:
    vol = st["volumes"].get(args.get("uuid"))
    if vol is not None and args.get("to") not in in_sync_of(vol):
        vol["in_sync"] = [*in_sync_of(vol), args.get("to")]
    return _ORIGINAL["volume_failover"](st, args)


def _expired_on_lost_contact(
    self: failover.Leases, nid: int, now: float, timing: failover.LeaseTiming
) -> bool:
    # Not seen active by this leader's Raft at this very look: taken for a lease that ran out.
    return self.contact.get(nid) != now or bool(_ORIGINAL["expired"](self, nid, now, timing))


@contextlib.contextmanager
def failover_bug(variant: str | None) -> Iterator[None]:
    """Patch `variant` into the real code for the block (the agent variants live in the agents)."""
    try:
        if variant == "no_lease_wait":
            failover.LeaseTiming.down_after_s = property(lambda t: 1.5 * t.renew_s)  # type: ignore[method-assign,assignment]
            failover.LeaseTiming.contact_s = property(lambda t: 0.0)  # type: ignore[method-assign,assignment]
        elif variant == "lost_contact_is_expiry":
            failover.Leases.expired = _expired_on_lost_contact  # type: ignore[method-assign]
        elif variant == "promote_out_of_sync":
            failover.failover_target = _any_target  # type: ignore[assignment]
            map_mod.HANDLERS["volume_failover"][1] = _failover_any
        yield
    finally:
        failover.LeaseTiming.down_after_s = _ORIGINAL["down_after_s"]  # type: ignore[method-assign]
        failover.LeaseTiming.contact_s = _ORIGINAL["contact_s"]  # type: ignore[method-assign]
        failover.Leases.expired = _ORIGINAL["expired"]  # type: ignore[method-assign]
        failover.failover_target = _ORIGINAL["failover_target"]
        map_mod.HANDLERS["volume_failover"][1] = _ORIGINAL["volume_failover"]
