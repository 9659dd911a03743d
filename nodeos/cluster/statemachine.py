"""What the Raft driver needs of the state machine it replicates: a small interface, not a class.

The driver (nodeos/cluster/driver.py) hands every committed entry to `apply`, writes `snapshot()`
to its storage now and then, and `restore`s a snapshot it starts from or receives from the
leader; it never reaches into the state itself. This is hashicorp/raft's FSM (`fsm.go`: Apply,
Snapshot, Restore). The cluster map (nodeos/cluster/map.py, `ClusterMap`) is the one
implementation the daemon runs; a test may hand the driver another.

`ReplicatedMap` adds the three things the driver reads of the map for its own work beside Raft:
the members and their peer addresses (the transport's peers), the voter policy (the voter
keeper), and the events an apply recorded (the leader writes them to the journal).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from nodeos.cluster.voters import Policy


@runtime_checkable
class StateMachine(Protocol):
    """A deterministic state machine fed by committed entries, in log order."""

    @property
    def applied_index(self) -> int:
        """The index of the last entry applied (or of the snapshot restored)."""
        ...

    def apply(self, index: int, data: bytes, at: float | None = None) -> dict[str, Any]:
        """Apply the command of the committed entry at `index` (empty data: a no-op that only
        moves the applied index). `at` is the proposer's time stamped on the entry. Returns
        `{"result": ...}` or `{"error": {...}}`, the same on every node; an entry at or below
        the applied index is not applied again."""
        ...

    def snapshot(self) -> bytes:
        """The whole state as of `applied_index`, as bytes `restore` reads back."""
        ...

    def restore(self, data: bytes, index: int | None = None) -> None:
        """Replace the state by a snapshot's (empty data: the empty state); `index`: the log
        index the snapshot was taken at, which becomes the applied index."""
        ...


@runtime_checkable
class ReplicatedMap(StateMachine, Protocol):
    """The state machine the driver runs: what it reads besides apply, snapshot and restore."""

    @property
    def nodes(self) -> Mapping[int, Mapping[str, Any]]:
        """Members by Raft id, each with its `addresses` (`peer`: host:port) and failure domain."""
        ...

    def voter_policy(self) -> Policy:
        """How many voters the cluster keeps and when a voter counts as lost."""
        ...

    def event_seq(self) -> int:
        """The sequence number the next recorded event takes."""
        ...

    def new_events(self, since_seq: int) -> list[dict[str, Any]]:
        """Events recorded with seq >= since_seq (what the last apply recorded)."""
        ...
