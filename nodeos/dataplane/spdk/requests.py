"""SPDK JSON-RPC requests, built as (method, params) (pure).

Parameter names and shapes follow what a real SPDK v26.05 target accepted in the recorded
transcript (../shared/spdk/); methods the recording lacks follow the `spdk` package's own
CLI. Optional values left as None are not sent, as the package's client does.
"""

from __future__ import annotations

from typing import Any

from nodeos.dataplane.base import Listener, is_tls
from nodeos.errors import BadInput

Request = tuple[str, dict[str, Any]]
DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"
MIB = 1024 * 1024
# SPDK's RPC spells ANA states with underscores and knows only these three.
ANA_TO_SPDK = {"optimized": "optimized", "non-optimized": "non_optimized", "inaccessible": "inaccessible"}
ANA_FROM_SPDK = {v: k for k, v in ANA_TO_SPDK.items()}


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def listen_address(li: Listener) -> dict[str, str]:
    return {
        "trtype": li.trtype.upper(),
        "adrfam": "IPv4" if li.adrfam == "ipv4" else "IPv6",
        "traddr": li.traddr,
        "trsvcid": str(li.trsvcid),
    }


def mib_ceil(size_bytes: int) -> int:
    return -(-size_bytes // MIB)


# ---- framework / bdevs ------------------------------------------------------------------
def get_version() -> Request:
    return "spdk_get_version", {}


def malloc_create_for_tests(name: str, num_blocks: int, block_size: int = 4096) -> Request:
    """A RAM bdev: tests only, never a production drive."""
    return "bdev_malloc_create", {"name": name, "num_blocks": num_blocks, "block_size": block_size}


def aio_create_for_tests(
    filename: str, name: str, block_size: int | None = 4096, uuid: str | None = None
) -> Request:
    """A file-backed bdev: tests only, never a production drive."""
    return "bdev_aio_create", _clean(
        {"filename": filename, "name": name, "block_size": block_size, "uuid": uuid}
    )


def nvme_attach_pcie(name: str, bdf: str) -> Request:
    return "bdev_nvme_attach_controller", {"name": name, "trtype": "PCIe", "traddr": bdf}


def nvme_health(name: str) -> Request:
    """SMART / health log page of an attached NVMe controller (SPDK's bdev_nvme)."""
    return "bdev_nvme_get_controller_health_info", {"name": name}


def get_bdevs(name: str | None = None) -> Request:
    return "bdev_get_bdevs", _clean({"name": name})


def raid0_create(name: str, base_bdevs: list[str], strip_size_kb: int = 64) -> Request:
    # superblock: the raid reassembles itself from its members when the target restarts.
    return "bdev_raid_create", {
        "name": name,
        "raid_level": "raid0",
        "strip_size_kb": strip_size_kb,
        "base_bdevs": list(base_bdevs),
        "superblock": True,
    }


def raid_delete(name: str) -> Request:
    return "bdev_raid_delete", {"name": name}


def set_qos_limit(bdev: str, rw_ios_per_sec: int, rw_mbytes_per_sec: int) -> Request:
    return "bdev_set_qos_limit", {
        "name": bdev,
        "rw_ios_per_sec": rw_ios_per_sec,
        "rw_mbytes_per_sec": rw_mbytes_per_sec,
    }


# ---- lvol -------------------------------------------------------------------------------
def lvstore_create(
    bdev_name: str, lvs_name: str, cluster_sz: int = 4 * MIB, clear_method: str = "none"
) -> Request:
    # clear_method none: thin lvols never expose stale data (unallocated clusters read as
    # zeros, a first write fills the rest of its cluster from the zero device).
    return "bdev_lvol_create_lvstore", {
        "bdev_name": bdev_name,
        "lvs_name": lvs_name,
        "cluster_sz": cluster_sz,
        "clear_method": clear_method,
    }


def lvstore_delete(lvs_name: str) -> Request:
    return "bdev_lvol_delete_lvstore", {"lvs_name": lvs_name}


def get_lvstores(lvs_name: str | None = None) -> Request:
    return "bdev_lvol_get_lvstores", _clean({"lvs_name": lvs_name})


def get_lvols(lvs_name: str | None = None) -> Request:
    return "bdev_lvol_get_lvols", _clean({"lvs_name": lvs_name})


def lvol_create(lvs_name: str, lvol_name: str, size_bytes: int) -> Request:
    return "bdev_lvol_create", {
        "lvol_name": lvol_name,
        "size_in_mib": mib_ceil(size_bytes),
        "lvs_name": lvs_name,
        "thin_provision": True,
    }


def lvol_resize(alias: str, size_bytes: int) -> Request:
    return "bdev_lvol_resize", {"name": alias, "size_in_mib": mib_ceil(size_bytes)}


def lvol_delete(alias: str) -> Request:
    return "bdev_lvol_delete", {"name": alias}


def lvol_snapshot(alias: str, snapshot_name: str) -> Request:
    return "bdev_lvol_snapshot", {"lvol_name": alias, "snapshot_name": snapshot_name}


def lvol_clone(snapshot_alias: str, clone_name: str) -> Request:
    return "bdev_lvol_clone", {"snapshot_name": snapshot_alias, "clone_name": clone_name}


# ---- nvmf -------------------------------------------------------------------------------
def create_transport(trtype: str) -> Request:
    return "nvmf_create_transport", {"trtype": trtype.upper()}


def get_transports() -> Request:
    return "nvmf_get_transports", {}


def create_subsystem(
    nqn: str,
    serial: str | None = None,
    model: str | None = None,
    *,
    allow_any_host: bool = False,
    ana_reporting: bool = True,
    min_cntlid: int | None = None,
    max_cntlid: int | None = None,
) -> Request:
    return "nvmf_create_subsystem", _clean(
        {
            "nqn": nqn,
            "serial_number": serial,
            "model_number": model,
            "allow_any_host": allow_any_host,
            "ana_reporting": ana_reporting,
            "min_cntlid": min_cntlid,
            "max_cntlid": max_cntlid,
        }
    )


def delete_subsystem(nqn: str) -> Request:
    return "nvmf_delete_subsystem", {"nqn": nqn}


def get_subsystems(nqn: str | None = None) -> Request:
    return "nvmf_get_subsystems", _clean({"nqn": nqn})


def add_ns(
    nqn: str,
    bdev_name: str,
    nsid: int | None = 1,
    *,
    uuid: str | None = None,
    nguid: str | None = None,
    anagrpid: int | None = None,
) -> Request:
    ns = _clean(
        {
            "bdev_name": bdev_name,
            "nsid": nsid,
            "uuid": uuid,
            "nguid": nguid.upper() if nguid else None,
            "anagrpid": anagrpid,
        }
    )
    return "nvmf_subsystem_add_ns", {"nqn": nqn, "namespace": ns}


def remove_ns(nqn: str, nsid: int = 1) -> Request:
    return "nvmf_subsystem_remove_ns", {"nqn": nqn, "nsid": nsid}


def add_listener(nqn: str, li: Listener, ana_state: str | None = None) -> Request:
    """`ana_state`: the listener's state in every ANA group from the start (SPDK's default:
    optimized), which spares a set_ana_state after it."""
    req = {"nqn": nqn, "listen_address": listen_address(li), "ana_state": ANA_TO_SPDK.get(ana_state or "")}
    if is_tls(li):  # TLS 1.3 required on this address and port (SPDK's ssl socket)
        req["secure_channel"] = True
    return "nvmf_subsystem_add_listener", _clean(req)


def remove_listener(nqn: str, li: Listener) -> Request:
    return "nvmf_subsystem_remove_listener", {"nqn": nqn, "listen_address": listen_address(li)}


def get_listeners(nqn: str) -> Request:
    return "nvmf_subsystem_get_listeners", {"nqn": nqn}


def add_referral(ref: Listener) -> Request:
    return "nvmf_discovery_add_referral", {"address": listen_address(ref)}


def remove_referral(ref: Listener) -> Request:
    return "nvmf_discovery_remove_referral", {"address": listen_address(ref)}


def get_referrals() -> Request:
    return "nvmf_discovery_get_referrals", {}


def set_ana_state(nqn: str, li: Listener, state: str, anagrpid: int | None = None) -> Request:
    return "nvmf_subsystem_listener_set_ana_state", _clean(
        {
            "nqn": nqn,
            "listen_address": listen_address(li),
            "ana_state": ANA_TO_SPDK.get(state, state),
            "anagrpid": anagrpid,
        }
    )


def set_ns_ana_group(nqn: str, nsid: int, anagrpid: int) -> Request:
    """Moves a namespace to another ANA group; SPDK pauses the namespace for it (its outstanding
    I/O completes first, new I/O waits and then sees the new group's state)."""
    return "nvmf_subsystem_set_ns_ana_group", {"nqn": nqn, "nsid": nsid, "anagrpid": anagrpid}


def add_host(nqn: str, host: str, dhchap_key: str | None = None, psk: str | None = None) -> Request:
    """`dhchap_key`, `psk`: keyring key names (the TLS PSK of the host on this subsystem)."""
    return "nvmf_subsystem_add_host", _clean({"nqn": nqn, "host": host, "dhchap_key": dhchap_key, "psk": psk})


def remove_host(nqn: str, host: str) -> Request:
    return "nvmf_subsystem_remove_host", {"nqn": nqn, "host": host}


def get_controllers(nqn: str) -> Request:
    return "nvmf_subsystem_get_controllers", {"nqn": nqn}


def keyring_add(name: str, path: str) -> Request:
    return "keyring_file_add_key", {"name": name, "path": path}


def keyring_remove(name: str) -> Request:
    return "keyring_file_remove_key", {"name": name}


def keyring_get_keys() -> Request:
    return "keyring_get_keys", {}


def get_config(subsystem: str) -> Request:
    """What SPDK would replay to rebuild `subsystem` ("nvmf": the only place it says which
    TLS PSK a subsystem's host has; nvmf_get_subsystems does not)."""
    return "framework_get_config", {"name": subsystem}


# ---- mirrors (spdk/mirror.py) -------------------------------------------------------------
def nvme_detach(name: str) -> Request:
    return "bdev_nvme_detach_controller", {"name": name}


def nvme_get_controllers(name: str | None = None) -> Request:
    return "bdev_nvme_get_controllers", {"name": name} if name else {}


def raid1_create(name: str, members: list[str]) -> Request:
    return "bdev_raid_create", {
        "name": name,
        "raid_level": "raid1",
        "base_bdevs": members,
        "superblock": False,
    }


def raid_get_bdevs(category: str = "all") -> Request:
    return "bdev_raid_get_bdevs", {"category": category}


def raid_add_base(raid: str, member: str) -> Request:
    return "bdev_raid_add_base_bdev", {"raid_bdev": raid, "base_bdev": member}


def raid_remove_base(member: str) -> Request:
    return "bdev_raid_remove_base_bdev", {"name": member}


def raid_set_options(max_mb_per_s: int) -> Request:
    return "bdev_raid_set_options", {"process_max_bandwidth_mb_sec": max_mb_per_s}


def null_create(name: str, num_blocks: int, block_size: int) -> Request:
    return "bdev_null_create", {"name": name, "num_blocks": num_blocks, "block_size": block_size}


def null_delete(name: str) -> Request:
    return "bdev_null_delete", {"name": name}


# --- request shaping (pure): what the exports send, and in which rounds ---

# Requests that pause the subsystem: SPDK refuses (-EBUSY) a second pause while one is under way.
PAUSING = ("nvmf_subsystem_add_ns", "nvmf_subsystem_add_listener")
QOS_IOPS_STEP = 1000  # SPDK takes IOPS limits in multiples of 1000 only


def check_qos(iops: int | None, mbps: int | None) -> tuple[int, int]:
    i, m = iops or 0, mbps or 0
    if i % QOS_IOPS_STEP:
        raise BadInput(
            f"qos_iops {i} is not a multiple of {QOS_IOPS_STEP}",
            field="qos_iops",
            allowed=f"0 (unlimited) or a multiple of {QOS_IOPS_STEP}",
        )
    return i, m


def new_volume_rounds(lvol_create: Request, export: list[Request]) -> list[list[Request]]:
    """A new volume's requests (its lvol's, then its new export's, in the order planned) in rounds
    whose requests need none of each other's answers: the lvol and its subsystem; then the rest in
    order, a round closed before a second request that pauses the subsystem (namespace,
    listeners: hosts are added without a pause, QoS is the bdev's). Listeners come after the
    hosts, as planned: the volume is never reachable with a stale host list."""
    rounds = [[lvol_create, *(r for r in export if r[0] == "nvmf_create_subsystem")]]
    cur: list[Request] = []
    for req in (r for r in export if r[0] != "nvmf_create_subsystem"):
        if req[0] in PAUSING and any(r[0] in PAUSING for r in cur):
            rounds.append(cur)
            cur = []
        cur.append(req)
    return [*rounds, cur] if cur else rounds
