"""Reading SPDK's answers (pure); defensive about missing keys. Also what SPDK will show after
calls nodeos just made (an lvol's size, a subsystem made from scratch), so the create path
need not read it back."""

from __future__ import annotations

from typing import Any

from nodeos.dataplane.base import Listener
from nodeos.dataplane.spdk.requests import ANA_FROM_SPDK, MIB, listen_address, mib_ceil


def listener_of(addr: dict[str, Any]) -> Listener:
    return Listener(
        trtype=str(addr.get("trtype", "")).lower(),  # type: ignore[arg-type]
        traddr=str(addr.get("traddr", "")),
        trsvcid=str(addr.get("trsvcid", "")),
        adrfam="ipv6" if str(addr.get("adrfam", "")).lower() == "ipv6" else "ipv4",
    )


def bdev_size(bdev: dict[str, Any]) -> int:
    return int(bdev.get("num_blocks", 0)) * int(bdev.get("block_size", 0))


def bdev_lvol(bdev: dict[str, Any]) -> dict[str, Any] | None:
    ds = bdev.get("driver_specific") or {}
    lv = ds.get("lvol")
    return lv if isinstance(lv, dict) else None


def lvol_alias(bdev: dict[str, Any]) -> str | None:
    for a in bdev.get("aliases") or []:
        if "/" in a:
            return str(a)
    return None


def lvol_kind(lv: dict[str, Any]) -> str:
    # SPDK records no "made by clone" flag: a volume that was snapshotted reports as a clone
    # of its snapshot too. The daemon's own records say which is which.
    if lv.get("snapshot"):
        return "snapshot"
    if lv.get("clone"):
        return "clone"
    return "volume"


def listener_ana(entry: dict[str, Any], group: int) -> str | None:
    """ANA state of one group on one listener from nvmf_subsystem_get_listeners."""
    for st in entry.get("ana_states") or []:
        if int(st.get("ana_group", -1)) == group:
            s = str(st.get("ana_state", ""))
            return ANA_FROM_SPDK.get(s, s)
    return None


def subsystem_hosts(sub: dict[str, Any]) -> dict[str, str | None]:
    """host NQN -> DH-HMAC-CHAP key name (None without)."""
    out: dict[str, str | None] = {}
    for h in sub.get("hosts") or []:
        if isinstance(h, dict) and h.get("nqn"):
            out[str(h["nqn"])] = h.get("dhchap_key")
        elif isinstance(h, str):
            out[h] = None
    return out


def subsystem_ns1(sub: dict[str, Any]) -> dict[str, Any] | None:
    for ns in sub.get("namespaces") or []:
        if int(ns.get("nsid", 0)) == 1:
            return ns
    return None


def lvol_size(size_bytes: int, cluster_size: int) -> int:
    """The size SPDK gives an lvol made of `size_bytes` (sent as whole MiB: requests.lvol_create)
    in an lvstore of `cluster_size`: whole clusters, rounded up."""
    want = mib_ceil(size_bytes) * MIB
    return -(-want // cluster_size) * cluster_size if cluster_size > 0 else want


def made_subsystem(
    nqn: str,
    bdev_name: str,
    ana_group: int,
    listeners: tuple[Listener, ...],
    hosts: dict[str, str | None],
) -> dict[str, Any]:
    """A subsystem as nvmf_get_subsystems shows it once made from nothing with namespace 1 over
    `bdev_name` (the bdev's own name, an lvol's UUID) in `ana_group`, these `listeners` and
    `hosts` (host NQN -> DH-HMAC-CHAP key name); only the keys the readers above use."""
    return {
        "nqn": nqn,
        "subtype": "NVMe",
        "listen_addresses": [listen_address(li) for li in listeners],  # as SPDK echoes them
        "hosts": [{"nqn": h, **({"dhchap_key": k} if k else {})} for h, k in hosts.items()],
        "namespaces": [{"nsid": 1, "bdev_name": bdev_name, "name": bdev_name, "anagrpid": ana_group}],
    }
