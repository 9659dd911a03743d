"""Deliberately broken failover variants, for the failover workload's self-test only.

Each one puts one known bug into the real controller, map or agent rules (patched for one run)
or into the simulated agents and kernel, so tests prove the failover invariants catch it.
Production code never sets these. docs/testing.md lists what catches each.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from nodeos.agent import legs
from nodeos.cluster import leader_contact
from nodeos.cluster import map as map_mod
from nodeos.storage import failover
from nodeos.storage.failover_map import in_sync_of
from nodeos.storage.lookup import health_of

from . import sim_kernel

FAILOVER_BROKEN_VARIANTS = {
    "no_lease_wait": "the leader calls a node down once one renewal is late and its Raft did not see it "
    "active at that look, not after its lease",
    "promote_out_of_sync": "the controller and volume_failover ignore the in-sync set",
    "no_self_fence": "a node whose lease ran out keeps serving as primary",
    "no_epoch_check": "replicas take writes from any primary, whatever its epoch",
    "unfence_on_any_grant": "any granted renewal lifts the fence (a node called down, its map behind)",
    "ack_on_map_view": "the leg rules count in sync only what the primary's map does, not what its own "
    "reports (in flight or held) may bring back: a leg is cut while a report calls it in sync",
    "ack_degraded": "md fails a leg whose I/O went unanswered on its own (a finite fast_io_fail_tmo) and "
    "acknowledges the held writes on the other legs before the map knows",
    "no_write_serialize": "the primary's md mirror leaves serialize_policy off: two writes to one block in "
    "flight on a leg together land in either order (a host's timed-out write over its retry's successor)",
    "lost_contact_is_expiry": "the leader takes a node its Raft does not see active for one whose lease ran "
    "out (called down, and its volumes failed over, before it has fenced itself)",
    "keep_open_in_sync_elsewhere": "a fenced node keeps every primary of its unfenced, not only those whose "
    "only in-sync replica is its own (issue 29's rule without its in-sync test)",
    "report_in_sync_out_of_standing": "a node without a good lease still reports a rebuilt leg in sync, "
    "while it keeps serving its sole primaries: the leader gets somebody to promote",
    "fence_after_lease": "a node fences itself only a whole lease after its lease ended (2 x lease_s), "
    "long after the leader may call it down",
    "contact_not_noted": "members never note a leader's messages (nor their own leading): asked by a new "
    "leader, each names its own start, and every lease counts from then (issue 29's lease floor)",
    "resync_skips_dirty_region": "a leg back in the same md gets its dirty regions copied but the first one "
    "md dirtied while it was away (a write it had in flight or queued when it left)",
    "planned_move_on_handoff_record": "a planned move applies on the map's handoff record alone "
    "(volume_failover v1), whatever the old primary reported since (a restart retracts its handed_off)",
}

_ORIGINAL: dict[str, Any] = {
    "down_after_s": failover.LeaseTiming.down_after_s,
    "fence_after_s": failover.LeaseTiming.fence_after_s,
    "note": leader_contact.LeaderContact.note,
    "contact_s": failover.LeaseTiming.contact_s,
    "expired": failover.Leases.expired,
    "failover_target": failover.failover_target,
    "volume_failover": dict(map_mod.HANDLERS["volume_failover"]),
    "counted_in_sync": legs.counted_in_sync,
    "reset_on_unanswered": sim_kernel.reset_on_unanswered,
    "resync_regions": sim_kernel.resync_regions,
}


def _counted_on_map_view(vol: dict[str, Any], me: int, held: Any, sent: Any) -> set[int]:
    return {int(n) for n in in_sync_of(vol)} - {me}


def _any_target(st: dict[str, Any], vol: dict[str, Any], *_: Any, **__: Any) -> int | None:
    for slot in vol["placement"]:
        nid = slot["node"]
        if nid != vol["primary"] and health_of(st, nid) == "up":
            return int(nid)
    return None


def _failover_any(version: int) -> Any:
    def handler(st: dict[str, Any], args: dict[str, Any]) -> Any:
        vol = st["volumes"].get(args.get("uuid"))
        if vol is not None and args.get("to") not in in_sync_of(vol):
            vol["in_sync"] = [*in_sync_of(vol), args.get("to")]
        return _ORIGINAL["volume_failover"][version](st, args)

    return handler


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
        elif variant == "fence_after_lease":
            failover.LeaseTiming.fence_after_s = property(lambda t: 2 * t.lease_s)  # type: ignore[method-assign,assignment]
        elif variant == "contact_not_noted":
            leader_contact.LeaderContact.note = lambda *_: None  # type: ignore[method-assign]
        elif variant == "lost_contact_is_expiry":
            failover.Leases.expired = _expired_on_lost_contact  # type: ignore[method-assign]
        elif variant == "ack_on_map_view":  # the product's leg rules (nodeos/agent/legs.py)
            legs.counted_in_sync = _counted_on_map_view  # type: ignore[assignment]
        elif variant == "ack_degraded":  # the simulated kernel's md (sim_kernel.py)
            sim_kernel.reset_on_unanswered = sim_kernel.md_fails_leg
        elif variant == "resync_skips_dirty_region":  # the simulated md's bitmap resync
            sim_kernel.resync_regions = sim_kernel.skip_first_region
        elif variant == "promote_out_of_sync":
            failover.failover_target = _any_target  # type: ignore[assignment]
            for v in _ORIGINAL["volume_failover"]:
                map_mod.HANDLERS["volume_failover"][v] = _failover_any(v)
        elif variant == "planned_move_on_handoff_record":
            map_mod.HANDLERS["volume_failover"][2] = _ORIGINAL["volume_failover"][1]
        yield
    finally:
        failover.LeaseTiming.down_after_s = _ORIGINAL["down_after_s"]  # type: ignore[method-assign]
        failover.LeaseTiming.contact_s = _ORIGINAL["contact_s"]  # type: ignore[method-assign]
        failover.LeaseTiming.fence_after_s = _ORIGINAL["fence_after_s"]  # type: ignore[method-assign]
        leader_contact.LeaderContact.note = _ORIGINAL["note"]  # type: ignore[method-assign]
        failover.Leases.expired = _ORIGINAL["expired"]  # type: ignore[method-assign]
        failover.failover_target = _ORIGINAL["failover_target"]
        map_mod.HANDLERS["volume_failover"].update(_ORIGINAL["volume_failover"])
        # Only what this variant patched: a test may patch these for several runs itself.
        if variant == "ack_on_map_view":
            legs.counted_in_sync = _ORIGINAL["counted_in_sync"]
        if variant == "ack_degraded":
            sim_kernel.reset_on_unanswered = _ORIGINAL["reset_on_unanswered"]
        if variant == "resync_skips_dirty_region":
            sim_kernel.resync_regions = _ORIGINAL["resync_regions"]
