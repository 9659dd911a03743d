"""The typed arguments of every map command: one record (a msgspec Struct) per command version.

nodeos/cluster/commands.py names each version's record (`MapCommand.args`); this module holds
the records of the cluster's own commands and the check, nodeos/cluster/command_args_storage.py
those of the storage domain's. A record says what a proposer must send: each argument's type,
whether it may be left out, the bounds the handler enforces.

Where it is used, and why the two uses differ:
- **Proposing** (`check`, run by the daemon's driver before Raft, nodeos/cluster/feature_member.py):
  strict. A command whose arguments break its record never reaches the log; the caller gets
  `bad_input` naming the field (the console's exit 2).
- **Applying** (`conforms`, run by the map on every committed entry): observed, never enforced.
  A log may hold entries proposed by an older release, which checked less; a node that refused
  at apply what its handler used to accept would hold another map than the older members
  applying the same log. So what a handler accepts at apply is frozen once its version is
  released: the handler's own checks decide (deterministically, the same on every release), and
  the map only counts the committed entries its record refuses (`ClusterMap.nonconforming`,
  which the simulator requires to stay 0: every proposer went through the check).

Unknown arguments are ignored, never refused, at both ends: an added optional argument keeps
the version, and an older leader proposing a newer member's report must not refuse it.
Changing a record: adding an optional field is compatible; a new required field, a narrower
type or a changed meaning is a new version of the command (commands.py says how).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec

from nodeos.errors import BadInput

NodeId = Annotated[int, msgspec.Meta(gt=0)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]  # map.py's `_str_arg`
Short = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Number = float  # msgspec takes an int for a float field, never a bool


class Args(msgspec.Struct, kw_only=True):
    """The arguments of one map command version (unknown fields are ignored)."""


def bad(field: str, message: str) -> ValueError:
    """An error a record's `__post_init__` raises: said like msgspec's own, with the field."""
    return ValueError(f"{message} - at `$.{field}`")


# --- membership and cluster-wide settings ------------------------------------------------------


class InitCluster(Args, kw_only=True):
    cluster_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    ca_holder: NodeId | None = None
    feature_level: Annotated[int, msgspec.Meta(ge=1)] | None = None


class MemberReport(Args, kw_only=True):
    """What a member's release knows (features.check_report): optional on add_node, node_update."""

    release: Short | None = None
    knows_level: Annotated[int, msgspec.Meta(ge=1)] | None = None


class AddNode(MemberReport, kw_only=True):
    node_id: NodeId
    role: str = "storage"
    addresses: dict[str, str] = {}
    failure_domain: Name | None = None
    name: Name | None = None
    rejoin: bool = False


class RemoveNode(Args, kw_only=True):
    node_id: NodeId


class NodeUpdate(MemberReport, kw_only=True):
    node_id: NodeId
    addresses: dict[str, str] = {}


class SetFailureDomain(Args, kw_only=True):
    node_id: NodeId
    failure_domain: Name


class ClusterSet(Args, kw_only=True):
    voters: int | None = None
    voter_down_s: Number | None = None


class UseJoinToken(Args, kw_only=True):
    token_id: Short
    node_id: NodeId
    uses: Annotated[int, msgspec.Meta(ge=1)]
    expires: Number
    now: Number


class Roll(Args, kw_only=True):
    """One step of a secret or CA roll (secretroll.next_section)."""

    gen: Annotated[int, msgspec.Meta(ge=1)]
    phase: str
    fp: bytes


class CaRoll(Roll, kw_only=True):
    holder: NodeId | None = None


class SetFeatureLevel(Args, kw_only=True):
    level: Annotated[int, msgspec.Meta(ge=1)]


# --- the key/value space ------------------------------------------------------------------------

MAX_KV_KEY = 256
MAX_KV_VALUE = 64 * 1024


def _kv_value(field: str, v: Any) -> None:
    if not isinstance(v, (str, int, bytes)) or isinstance(v, bool):
        raise bad(field, f"{field} must be a string, an integer or bytes")
    if isinstance(v, (str, bytes)) and len(v) > MAX_KV_VALUE:
        raise bad(field, f"{field} is longer than {MAX_KV_VALUE}")


class KvKey(Args, kw_only=True):
    key: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_KV_KEY)]


class KvPut(KvKey, kw_only=True):
    value: Any

    def __post_init__(self) -> None:
        _kv_value("value", self.value)


class KvCas(KvPut, kw_only=True):
    expect: Any = None

    def __post_init__(self) -> None:
        _kv_value("value", self.value)
        if self.expect is not None:
            _kv_value("expect", self.expect)


# --- the rolling upgrade and the event log -----------------------------------------------------


class Bundle(Args, kw_only=True):
    sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
    size: Annotated[int, msgspec.Meta(gt=0)]
    source: NodeId


class Domain(Args, kw_only=True):
    name: str
    nodes: Annotated[list[NodeId], msgspec.Meta(min_length=1)]


class UpgradeStart(Args, kw_only=True):
    id: Short
    version: Short
    bundle: Bundle
    domains: Annotated[list[Domain], msgspec.Meta(min_length=1)]
    allow_downgrade: bool = False


class UpgradeStep(Args, kw_only=True):
    """A compare-and-set: (`at`, `step`) must be the upgrade's, (`to_at`, `to_step`) its next."""

    id: Short
    at: int
    step: str
    to_at: int
    to_step: str
    sent: dict[int | str, str] | None = None
    note: str | None = None


class UpgradeState(Args, kw_only=True):
    id: Short
    state: str
    reason: str | None = None


class RecordEvent(Args, kw_only=True):
    """An event (nodeos/observe/events.py checks its kind and context); the map numbers it."""

    kind: str
    message: Annotated[str, msgspec.Meta(min_length=1)]
    at: Annotated[Number, msgspec.Meta(ge=0)]
    severity: str = "info"
    seq: Any = msgspec.UNSET

    def __post_init__(self) -> None:
        if self.seq is not msgspec.UNSET:
            raise bad("seq", "seq is assigned by the map, not the proposer")


# --- the check ------------------------------------------------------------------------------------

_AT = re.compile(r"at `\$\.([A-Za-z0-9_]+)")
_MISSING = re.compile(r"missing required field `([A-Za-z0-9_]+)`")


def check(name: str, version: int, record: type[Args], args: Any) -> Args:
    """`args` decoded strictly as `record`; BadInput naming the field at fault if they break it."""
    try:
        return msgspec.convert(args, record, strict=True)
    except msgspec.ValidationError as exc:
        text = str(exc)
        found = _AT.search(text) or _MISSING.search(text)
        field = found.group(1) if found else "args"
        raise BadInput(f"map command {name} v{version}: {text}", field=field) from None


def conforms(record: type[Args], args: Any) -> str | None:
    """None if `args` fit `record`, else what breaks it (the map's observation at apply)."""
    try:
        msgspec.convert(args, record, strict=True)
    except msgspec.ValidationError as exc:
        return str(exc)
    return None
