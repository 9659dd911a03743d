"""Names and sizes of a volume's mirror, derived from (volume uuid, node id) alone (pure).

Every node computes the same names, so nothing here is guessed from superblocks or from
the order devices appear in: the control plane keeps the volume uuid, the members and the
primary; these functions turn them into NQNs, namespace ids, md names and sizes.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from nodeos.dataplane.ids import check_id, normalize_uuid
from nodeos.errors import BadInput

VOLUME_NQN_PREFIX = "nqn.2014-08.io.nodeos:vol:"
REPLICA_NQN_PREFIX = "nqn.2014-08.io.nodeos:rep:"
MIRROR_PREFIX = "nodeos-"
VIEW_PREFIX = "nodeos-view-"
# Where data starts on every member: md 1.2 superblock at 4 KiB, the internal write-intent
# bitmap after it. Fixed so the array size equals the volume size on every node.
MIRROR_DATA_OFFSET = 8 * 1024 * 1024
MIRROR_BITMAP_CHUNK_KIB = 65536  # 64 MiB: a returning leg resyncs only dirty 64 MiB chunks
SIZE_ALIGN = 1024 * 1024  # volume sizes are whole MiB (md --size is in KiB, LVM rounds to extents)
# ANA groups on every port: a namespace's group says its state there; moving the namespace
# between groups (ana_grpid) flips one volume without touching the others on the port.
ANA_GROUP_OPTIMIZED = 1
ANA_GROUP_INACCESSIBLE = 2

_NS = uuidlib.UUID("6e6f6465-6f73-5265-706c-696361000000")  # namespace for uuid5 derivations
_MIRROR_ID_RE = re.compile(r"^nodeos-[0-9a-f]{24}$")


def _vol_uuid(vol_uuid: str) -> uuidlib.UUID:
    return uuidlib.UUID(normalize_uuid(vol_uuid, "vol_uuid"))


def volume_nqn(vol_uuid: str) -> str:
    """The front-end subsystem NQN: the same on every node exporting the volume."""
    return VOLUME_NQN_PREFIX + str(_vol_uuid(vol_uuid))


def replica_nqn(vol_uuid: str, node_id: str) -> str:
    """The subsystem under which node_id exports its replica LV to the primary only."""
    check_id(node_id, "node_id")
    return f"{REPLICA_NQN_PREFIX}{_vol_uuid(vol_uuid)}:{node_id}"


def replica_ids(vol_uuid: str, node_id: str) -> tuple[str, str]:
    """(uuid, nguid) of a replica namespace: fixed, so a returning replica is the same namespace."""
    check_id(node_id, "node_id")
    u = uuidlib.uuid5(_NS, f"{_vol_uuid(vol_uuid)}/{node_id}")
    return str(u), u.hex


def mirror_id_for(vol_uuid: str) -> str:
    """md array name of the volume's mirror (md names hold at most 32 bytes)."""
    return MIRROR_PREFIX + _vol_uuid(vol_uuid).hex[:24]


def mirror_uuid(mirror_id: str) -> str:
    """The md array uuid: fixed by the name, so assembly can insist on it."""
    check_mirror_id(mirror_id)
    return str(uuidlib.uuid5(_NS, "md/" + mirror_id))


def view_id_for(mirror_id: str) -> str:
    check_mirror_id(mirror_id)
    return mirror_id.removeprefix(MIRROR_PREFIX)


def check_mirror_id(mirror_id: str, field: str = "mirror_id") -> str:
    if not isinstance(mirror_id, str) or not _MIRROR_ID_RE.match(mirror_id):
        raise BadInput(
            f"{field} {mirror_id!r} is not a mirror id",
            field=field,
            allowed="nodeos-<24 lowercase hex digits> (mirror_id_for(volume uuid))",
        )
    return mirror_id


def member_size_bytes(volume_size: int) -> int:
    """Size of the LV holding one leg: the volume plus the fixed data offset."""
    check_volume_size(volume_size)
    return volume_size + MIRROR_DATA_OFFSET


MAX_MIRROR_MEMBERS = 8


def check_mirror_shape(spec: Any, check_member: Callable[[str], str]) -> None:
    """What a mirror spec is on every data plane: a valid id, 1 to MAX_MIRROR_MEMBERS distinct
    members (each as the data plane's `check_member` accepts it), a valid size."""
    check_mirror_id(spec.mirror_id)
    n = MAX_MIRROR_MEMBERS
    if not 1 <= len(spec.members) <= n:
        have = len(spec.members)
        raise BadInput(f"a mirror has 1-{n} members, not {have}", field="members", allowed=f"1-{n}")
    for m in spec.members:
        check_member(m)
    if len(set(spec.members)) != len(spec.members):
        raise BadInput("a member is listed twice", field="members")
    check_volume_size(spec.size_bytes)


def check_volume_size(size_bytes: int, field: str = "size_bytes") -> int:
    if not isinstance(size_bytes, int) or isinstance(size_bytes, bool) or size_bytes <= 0:
        raise BadInput(f"{field} {size_bytes!r} is not a positive number of bytes", field=field)
    if size_bytes % SIZE_ALIGN:
        raise BadInput(
            f"{field} {size_bytes} is not a whole number of MiB", field=field, allowed="multiples of 1048576"
        )
    return size_bytes
