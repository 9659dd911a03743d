"""The data plane objects of a replicated volume on one node, from its local record (pure).

A volume with replicas > 1 lives on 2-3 nodes (slot 0 = the primary, in the map's placement
order). Every replica node holds an LV of `lv_size(vol, caps)`: the volume plus the data
plane's `MirrorCaps.data_offset_bytes` in front (md: superblock and write-intent bitmap,
MIRROR_DATA_OFFSET; SPDK raid1: none, 0). Then:
- a secondary exports its LV as the replica subsystem (fixed uuid/nguid) to the primary's
  initiator only, and exports the volume's front end (same NQN, serial, uuid, nguid on every
  node) ANA inaccessible, from a linear view of its LV at the data offset (caps.views), else from
  the data plane's stand-in (block_view: SPDK, whose replica export holds the LV);
- the primary attaches the secondaries' replica namespaces, assembles md raid1 over its LV and
  them (members in slot order), and exports the front end from the md device, ANA optimized.
Each node's controllers get their own id range (by slot) so the host tells the paths apart.
"""

from __future__ import annotations

import dataclasses
import uuid as uuidlib
from typing import Any

from nodeos.dataplane import mirror_names as names
from nodeos.dataplane.base import ExportSpec, HostAccess, Listener, MirrorCaps, MirrorSpec, RemoteSpec
from nodeos.storage.failover_map import in_sync_of  # noqa: F401 - the agent's plan reads it here

NODE_NQN_PREFIX = "nqn.2014-08.io.nodeos:node:"
CNTLID_SPAN = 16000  # controller ids per slot: 3 slots fit under nvmet's 0xFFEF
_HOSTID_NS = uuidlib.UUID("6e6f6465-6f73-486f-7374-496400000000")


def node_host_nqn(cluster_id: str, node_id: int) -> str:
    """This node's initiator identity, the only host a replica subsystem admits."""
    return f"{NODE_NQN_PREFIX}{cluster_id}:{node_id}"


def node_host_id(host_nqn: str) -> str:
    """A host id of its own per host NQN (a shared one makes the kernel refuse the connect)."""
    return str(uuidlib.uuid5(_HOSTID_NS, host_nqn))


def replicated(vol: dict[str, Any]) -> bool:
    return int(vol.get("replicas") or 1) > 1


def lv_size(vol: dict[str, Any], caps: MirrorCaps) -> int:
    """The LV of this node's replica: the volume plus the data offset the data plane's mirror keeps."""
    return int(vol["size_bytes"]) + (caps.data_offset_bytes if replicated(vol) else 0)


def cntlid_range(slot: int) -> tuple[int, int]:
    return slot * CNTLID_SPAN + 1, (slot + 1) * CNTLID_SPAN


def node_up(st: dict[str, Any], nid: int) -> bool:
    return (st["nodes"].get(nid) or {}).get("health", "up") == "up"


def front_end(vol: dict[str, Any], spec: ExportSpec, fenced: bool = False) -> ExportSpec:
    """The volume's export on this replica node: the md device or a view of it (primary, ANA
    optimized unless this node is fenced) or the linear view of the replica (secondary, ANA
    inaccessible), in this slot's controller-id range."""
    primary = vol["role"] == "primary" and not fenced
    lo, hi = cntlid_range(int(vol["slot"]))
    # A secondary's front end smaller than the volume (a grow between its "legs" and "front"
    # steps, nodeos/agent/grow.py) withholds its namespace: a host whose multipath device took
    # its size from such a path last sets the primary's path aside until that path is rescanned
    # (Linux nvme_mpath_revalidate_paths), which nothing does: the host's I/O hangs (the soak).
    front = vol.get("front_bytes")  # absent: never grown, the front end is the volume's size
    lagging = vol["role"] != "primary" and front is not None and int(front) < int(vol["size_bytes"])
    return dataclasses.replace(
        spec,
        ana_group=names.ANA_GROUP_OPTIMIZED if primary else names.ANA_GROUP_INACCESSIBLE,
        ana_state="optimized" if primary else "inaccessible",
        cntlid_min=lo,
        cntlid_max=hi,
        device=str(vol["device"]),
        ns_enabled=not lagging,
    )


def replica_spec(vol: dict[str, Any], me: int, listeners: tuple[Listener, ...]) -> ExportSpec:
    """A secondary's LV, exported to the primary's initiator alone."""
    ruuid, rnguid = names.replica_ids(vol["uuid"], str(me))
    return ExportSpec(
        nqn=names.replica_nqn(vol["uuid"], str(me)),
        serial=rnguid[:20],
        pool_id=vol["pool_id"],
        vol_id=vol["vol_id"],
        uuid=ruuid,
        nguid=rnguid,
        listeners=listeners,
        hosts=(HostAccess(vol["primary_host_nqn"]),),
    )


def remote_specs(vol: dict[str, Any]) -> list[RemoteSpec]:
    """The primary's view of its secondaries, in slot order."""
    out = []
    for r in vol.get("remotes") or []:
        _, rnguid = names.replica_ids(vol["uuid"], str(r["node"]))
        out.append(
            RemoteSpec(
                nqn=names.replica_nqn(vol["uuid"], str(r["node"])),
                listener=Listener(r["trtype"], r["traddr"], r["trsvcid"], r.get("adrfam", "ipv4")),
                host_nqn=vol["host_nqn"],
                host_id=node_host_id(vol["host_nqn"]),
                nguid=rnguid,
            )
        )
    return out


def mirror_spec(vol: dict[str, Any], members: list[str], create: bool, caps: MirrorCaps) -> MirrorSpec:
    return MirrorSpec(
        mirror_id=names.mirror_id_for(vol["uuid"]),
        members=tuple(members),
        size_bytes=int(vol["size_bytes"]),
        data_offset_bytes=caps.data_offset_bytes,
        create=create,
        # a clone's legs carry its origin's superblock; without superblocks there is nothing to adopt
        adopt_uuid=vol.get("adopt_uuid") if create and caps.superblock else None,
    )


def origin_mirror_uuid(st: dict[str, Any], vol: dict[str, Any]) -> str | None:
    """For a replicated clone: the md uuid its legs carry (its snapshot's volume's array),
    which the clone's own new array replaces."""
    if vol.get("kind") != "clone" or not replicated(vol):
        return None
    snap = st["snapshots"].get(vol.get("origin_uuid") or "")
    return None if snap is None else names.mirror_uuid(names.mirror_id_for(snap["volume"]))


def view_id(vol: dict[str, Any]) -> str:
    return names.view_id_for(names.mirror_id_for(vol["uuid"]))


def view_path(vol: dict[str, Any]) -> str:
    """The linear view's device (nodeos/dataplane/kernel/mirror.py names it so)."""
    return f"/dev/mapper/{names.VIEW_PREFIX}{view_id(vol)}"


def record_fields(st: dict[str, Any], vol: dict[str, Any], me: int) -> dict[str, Any]:
    """What a replicated volume's local record keeps of the map: role, slot, the primary's
    identity (secondary) or the secondaries' addresses (primary)."""
    if int(vol.get("replicas") or 1) <= 1:
        return {"replicas": 1}
    cid = str(st["cluster_id"])
    slots = [s["node"] for s in vol["placement"]]
    out: dict[str, Any] = {
        "replicas": len(slots),
        "me": me,
        "slot": slots.index(me),
        "role": "primary" if vol["primary"] == me else "secondary",
        "epoch": vol["epoch"],
        "primary_host_nqn": node_host_nqn(cid, vol["primary"]),
    }
    if out["role"] == "primary":
        out["host_nqn"] = node_host_nqn(cid, me)
        remotes = []
        for nid in slots:
            if nid == me:
                continue
            lst = ((st["reports"].get(nid) or {}).get("dataplane") or {}).get("listeners") or []
            tcp = next((li for li in lst if li.get("trtype") == "tcp"), None)
            addr = tcp or {"trtype": "tcp", "traddr": "", "trsvcid": "4420"}
            remotes.append({"node": nid, "slot": slots.index(nid), **addr})
        out["remotes"] = remotes
    return out
