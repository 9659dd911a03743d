"""Every durable operation of a node, defined once (pure): what it is called, how it goes forward
and how it is undone (the Ops methods that do it), what recovery does with it after a crash, the
crash points it passes, and how the agent treats it (retried after a failure, whether it changes
a pool's free space, whether creates go together).

Before this list the same facts lived in six tables (Ops.forward / Ops.compensate,
model.RECOVERY, crash.STEPS, the agent's RETRIED_STEPS / CAPACITY_KEPT and its batching): a new
operation had to be added to each, and nothing said when one was forgotten. Those names remain,
derived from here (tests/unit/node/test_opspec.py holds Ops to it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Recovery = Literal["forward", "backward"]


@dataclass(frozen=True)
class OpSpec:
    name: str  # "volume.create": the intent's op, the agent's step
    forward: str  # the Ops attribute (or its `mirrors` collaborator's: "mirrors.assemble") that does it
    compensate: str  # the one that undoes it (or keeps the record for the next pass)
    # A daemon that died mid-operation: finish it (every step is idempotent) or undo it. A snapshot
    # is rolled back: taken later, it would not be the point in time asked for. Everything else
    # rolls forward: the operator asked for it and nothing was lost by waiting.
    recovery: Recovery
    crash_points: tuple[str, ...]  # in order; "intent" first and "done" last
    retried: bool = False  # a failure is tried again at the agent's next pass (else: when the map changes)
    keeps_capacity: bool = False  # thin: takes no space when made, the pools' free space is not read again
    batched: bool = False  # consecutive ones of a pass go to the data plane together (run_creates)


def _op(name: str, forward: str, compensate: str, recovery: Recovery, *points: str, **how: bool) -> OpSpec:
    return OpSpec(name, forward, compensate, recovery, ("intent", *points, "done"), **how)


# fmt: off
OPERATIONS: tuple[OpSpec, ...] = (
    _op("pool.create", "_pool_create", "_undo_pool_create", "forward", "pool-created"),
    _op("pool.delete", "_pool_delete", "restore:pools", "forward", "pool-deleted"),
    _op("volume.create", "_volume_create", "_undo_volume_create", "forward",
        "volume-created", "export-applied", keeps_capacity=True, batched=True),
    _op("volume.clone", "_volume_create", "_undo_volume_create", "forward",
        "clone-created", "export-applied", keeps_capacity=True),
    _op("volume.resize", "_volume_resize", "_undo_volume_resize", "forward",
        "volume-resized", "export-applied", retried=True),
    _op("volume.delete", "_volume_delete", "_undo_volume_delete", "forward",
        "export-removed", "volume-deleted"),
    _op("volume.snapshot", "snapshots.create", "snapshots.undo_create", "backward",
        "snapshot-created", keeps_capacity=True),
    _op("snapshot.delete", "snapshots.delete", "restore:snapshots", "forward", "snapshot-deleted"),
    _op("volume.grant", "_volume_export", "_undo_volume_export", "forward", "export-applied", retried=True),
    _op("volume.revoke", "_volume_export", "_undo_volume_export", "forward", "export-applied"),
    # Replicated volumes (nodeos/node/mirror_ops.py). Undone: the record stays and the agent's
    # next pass tries again.
    _op("volume.replica", "mirrors.replica_export", "mirrors.back_to_standby", "forward",
        "replica-exported", "front-exported"),
    _op("volume.mirror", "mirrors.assemble", "mirrors.back_to_standby", "forward",
        "remotes-attached", "mirror-assembled", "front-exported"),
    # Failover (issue 9): a role change the map committed is only ever finished.
    _op("volume.retarget", "mirrors.retarget", "mirrors.keep_for_retry", "forward",
        "replica-exported", retried=True),
    _op("volume.promote", "mirrors.promote", "mirrors.keep_for_retry", "forward",
        "replica-unexported", "mirror-assembled", "front-exported", retried=True),
    _op("volume.demote", "mirrors.demote", "mirrors.keep_for_retry", "forward",
        "front-fenced", "mirror-stopped", "leg-wiped", "replica-exported", retried=True),
    _op("volume.rejoin", "mirrors.rejoin", "mirrors.back_to_ready", "forward",
        "remotes-attached", retried=True),
    # A leftover the garbage rule removes (nodeos/node/orphan_ops.py): finished, never restored.
    _op("orphan.remove", "orphans.remove", "orphans.give_up", "forward", "exports-removed"),
)
# fmt: on
BY_NAME: dict[str, OpSpec] = {o.name: o for o in OPERATIONS}

# Crash points outside the durable operations (no intent): the primary's agent, writes of a
# mirror just frozen for a snapshot; the host registry.
OTHER_CRASH_POINTS: dict[str, tuple[str, ...]] = {
    "snapshot.freeze": ("frozen",),
    "host.add": ("done",),
    "host.remove": ("done",),
}


def recovery() -> dict[str, str]:
    return {o.name: o.recovery for o in OPERATIONS}


def crash_points() -> dict[str, tuple[str, ...]]:
    return {**{o.name: o.crash_points for o in OPERATIONS}, **OTHER_CRASH_POINTS}


def named(flag: str) -> tuple[str, ...]:
    """The operations with `flag` ("retried", "keeps_capacity", "batched") set."""
    return tuple(o.name for o in OPERATIONS if getattr(o, flag))
