"""SPDK's error answers turned into clear nodeos errors (pure).

SPDK answers with JSON-RPC codes (-32602 "Invalid parameters" for several different
causes, -32603 with a message) or with a negative errno (-17, -22, -19, -2); the precise
reason is often only in the target's log. We validate our own inputs before calling, so
what is left is explained per method with the causes that remain possible.
"""

from __future__ import annotations

import errno as _errno
from typing import Any

from nodeos.errors import (
    AlreadyExists,
    EnvironmentProblem,
    NodeosError,
    NotFound,
    OperationFailed,
)

INVALID_PARAMS = -32602
INTERNAL = -32603
METHOD_NOT_FOUND = -32601


# The object a create call makes (named in "exists already" messages).
_CREATES = {
    "bdev_lvol_snapshot": "snapshot_name",
    "bdev_lvol_clone": "clone_name",
    "bdev_lvol_create": "lvol_name",
}


def _obj(params: dict[str, Any], method: str = "") -> str:
    """The object a request is about, for the message (never a key or secret)."""
    made = params.get(_CREATES.get(method, ""))
    if isinstance(made, str):
        return made
    for key in ("nqn", "name", "lvol_name", "clone_name", "snapshot_name", "lvs_name", "bdev_name", "trtype"):
        v = params.get(key)
        if isinstance(v, str):
            return v
    return "?"


def _addr(params: dict[str, Any]) -> str:
    a = params.get("listen_address") or {}
    return f"{a.get('trtype', '?')} {a.get('traddr', '?')}:{a.get('trsvcid', '?')}"


def map_error(method: str, params: dict[str, Any], code: int, message: str) -> NodeosError:
    obj = _obj(params, method)
    ns = params.get("namespace") or {}
    tail = f" (SPDK {method}: {code} {message})"
    # -- per method, where SPDK's answer is ambiguous ------------------------------------
    if code == METHOD_NOT_FOUND:
        return EnvironmentProblem(
            f"this SPDK target has no RPC method {method}: too old, or built without it{tail}"
        )
    if method == "nvmf_create_subsystem" and code in (INTERNAL, INVALID_PARAMS):
        return OperationFailed(
            f"SPDK could not create subsystem {obj}: it exists already, or the target's subsystem limit "
            "is reached (default 1024; raise it with nvmf_set_max_subsystems before framework_start_init)"
            f"{tail}",
            field="nqn",
        )
    if method == "nvmf_subsystem_add_ns" and code == INVALID_PARAMS:
        return OperationFailed(
            f"SPDK could not add bdev {ns.get('bdev_name', '?')} as namespace {ns.get('nsid', '?')} "
            f"of {obj}: "
            f"the subsystem or the bdev does not exist, or the namespace id is taken{tail}"
        )
    if method == "nvmf_subsystem_add_listener" and code == INVALID_PARAMS:
        return AlreadyExists(
            f"SPDK could not add listener {_addr(params)} to {obj}: it exists already, the subsystem does "
            f"not exist, or the transport is not created{tail}",
            field="listeners",
        )
    if method == "nvmf_subsystem_listener_set_ana_state":
        if code == INVALID_PARAMS:
            return OperationFailed(
                f"SPDK refused ANA state {params.get('ana_state')!r} on {obj} listener {_addr(params)}: "
                f"the listener does not exist or the state is unknown{tail}",
                field="ana_state",
            )
        if "-22" in message or code == -_errno.EINVAL:
            return OperationFailed(
                f"SPDK could not set ANA group {params.get('anagrpid')} on {obj}: no namespace is in that "
                f"group{tail}",
                field="ana_group",
            )
    if method == "nvmf_create_transport" and code == INTERNAL:
        if "already exists" in message:
            return AlreadyExists(f"SPDK transport {obj} exists already{tail}", field="trtype")
        if obj == "RDMA":
            return EnvironmentProblem(
                f"SPDK could not create the RDMA transport: no usable RDMA device (check `rdma link`, "
                f"ibv_devices); TCP still works{tail}",
                field="trtype",
            )
        return EnvironmentProblem(f"SPDK could not create transport {obj}{tail}", field="trtype")
    if (
        method in ("bdev_lvol_create", "bdev_lvol_get_lvstores", "bdev_lvol_get_lvols")
        and code == -_errno.ENODEV
    ):
        lvs = params.get("lvs_name", "?")
        return NotFound(f"SPDK has no lvstore {lvs} (the pool does not exist){tail}", field="pool_id")
    if method == "bdev_lvol_delete" and ("not permitted" in message or code == -_errno.EPERM):
        return OperationFailed(
            f"SPDK refused to delete {obj}: a snapshot with clones cannot be deleted{tail}"
        )
    if method == "bdev_nvme_get_controllers" and "does not exist" in message:
        return NotFound(f"SPDK has no NVMe controller {obj}{tail}", field="nqn")
    # -- by errno / text ---------------------------------------------------------------
    if code == -_errno.EEXIST or message == "File exists":
        return AlreadyExists(f"SPDK: {obj} exists already{tail}")
    if code in (-_errno.ENODEV, -_errno.ENOENT) or message in ("No such device", "No such file or directory"):
        what = "file" if code == -_errno.ENOENT else "object"
        return NotFound(f"SPDK: no such {what} {obj}{tail}")
    if code == -_errno.EINVAL:
        return OperationFailed(f"SPDK rejected an argument of {method} for {obj}{tail}")
    if code == -_errno.ENOSPC:
        return OperationFailed(f"SPDK: not enough space for {obj}{tail}")
    if code == -_errno.EBUSY:
        return OperationFailed(f"SPDK: {obj} is in use{tail}")
    if code == INVALID_PARAMS:
        return OperationFailed(
            f"SPDK rejected the parameters of {method} for {obj}; see the target's log{tail}"
        )
    return OperationFailed(f"SPDK {method} failed for {obj}{tail}")


def raid_conflict(
    name: str, members: list[str], raids: list[dict[str, Any]], err: NodeosError
) -> NodeosError:
    """What SPDK's -17 "File exists" to bdev_raid_create really meant, from bdev_raid_get_bdevs
    (all) read just after (SPDK v26.05 module/bdev/raid/bdev_raid.c): a raid of that name SPDK
    assembled by itself from the superblocks it found (a bdev only once every member is there,
    so the name lookup before the create missed it), or -- no such raid -- a member holds the
    superblock of a different raid ("Superblock of a different raid bdev found", target log)."""
    at = err.message.find(" (SPDK ")
    tail = err.message[at:] if at >= 0 else ""
    same = next((r for r in raids if r.get("name") == name), None)
    if same is not None:
        listed = same.get("base_bdevs_list") or []
        have = [str(b.get("name")) for b in listed if b.get("is_configured")]
        gone = [str(b.get("uuid")) for b in listed if not b.get("is_configured")]
        return OperationFailed(
            f"raid {name} exists in SPDK in state {same.get('state', '?')}: assembled from the superblocks "
            f"on its drives, it has {len(have)} of {same.get('num_base_bdevs', len(listed))} members "
            f"({', '.join(have) or 'none'}; missing the drive(s) with UUID {', '.join(gone) or '?'}): "
            f"the drives it was made of are not all attached (a drive missing, or re-created with another "
            f"UUID){tail}",
            field="drives",
        )
    held = {
        str(b.get("name")): str(r.get("name"))
        for r in raids
        for b in r.get("base_bdevs_list") or []
        if b.get("name") in members
    }
    if held:
        m, r = sorted(held.items())[0]
        return OperationFailed(
            f"drive {m} is a member of another raid, {r}; remove it from that raid first{tail}",
            field="drives",
        )
    return OperationFailed(
        f"raid {name} was not created: one of its drives ({', '.join(members)}) holds the superblock of a "
        "different raid (one made before over these drives, whose recorded member UUIDs no longer match "
        "them: drives replaced, or AIO files re-created after a target restart; the target's log names "
        "the drive: 'Superblock of a different raid bdev found on bdev ...'). SPDK does not overwrite it: "
        f"attach the drives that raid was made of, or wipe the superblock to reuse the drive{tail}",
        field="drives",
    )
