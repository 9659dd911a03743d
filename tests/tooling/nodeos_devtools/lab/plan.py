"""The shape of a lab, decided without side effects: names, sizes, addresses, identities."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from nodeos.errors import BadInput
from nodeos_devtools.lab.qemu import PEER_PORT, VmSpec

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,15}$")
MAX_STORAGE = 8
MAX_HOSTS = 8
MAX_DRIVES = 8
DRIVE_SIZE_MIN_MIB = 64
DRIVE_SIZE_MAX_MIB = 64 * 1024
SUBNETS = 512  # 198.18.0.0/15 holds 512 /24s
STORAGE_MEMORY_MIB = 1024
HOST_MEMORY_MIB = 768


def subnet_of(index: int) -> str:
    """The /24 prefix (three octets) of subnet number index in 198.18.0.0/15."""
    return f"198.{18 + index // 256}.{index % 256}"


def check_name(name: str) -> str:
    if not NAME_RE.match(name or ""):
        raise BadInput(
            f"lab name {name!r} is not valid",
            field="name",
            allowed="1-16 characters: lower-case letters, digits, '-' (not first)",
        )
    return name


def check_counts(storage: int, drives: int, hosts: int, drive_size_mib: int) -> None:
    for field, value, lo, hi in (
        ("storage", storage, 1, MAX_STORAGE),
        ("drives", drives, 1, MAX_DRIVES),
        ("hosts", hosts, 0, MAX_HOSTS),
        ("drive_size_mib", drive_size_mib, DRIVE_SIZE_MIN_MIB, DRIVE_SIZE_MAX_MIB),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise BadInput(
                f"{field} must be between {lo} and {hi}, got {value!r}", field=field, allowed=f"{lo}..{hi}"
            )


def plan_vms(lab: str, subnet: int, storage: int, drives: int, hosts: int, drive_dir: Path) -> list[VmSpec]:
    """The VMs of a lab (pure): names, addresses, MACs, identities, drive serials."""
    prefix = subnet_of(subnet)
    vms: list[VmSpec] = []
    for role, count, first in (("storage", storage, 11), ("host", hosts, 101)):
        for i in range(1, count + 1):
            name = f"{'s' if role == 'storage' else 'h'}{i}"
            host_octet = first + i - 1
            hostid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.{lab}.lab.nodeos"))
            vm = VmSpec(
                name=name,
                role=role,
                index=host_octet,
                ip=f"{prefix}.{host_octet}/24",
                mac=f"52:54:00:{subnet // 256:02x}:{subnet % 256:02x}:{host_octet:02x}",
                hostnqn=f"nqn.2014-08.org.nvmexpress:uuid:{hostid}",
                hostid=hostid,
                memory_mib=STORAGE_MEMORY_MIB if role == "storage" else HOST_MEMORY_MIB,
            )
            if role == "storage":
                vm.drives = [
                    {"serial": f"NODEOS-{name}-{k}", "path": str(drive_dir / f"{name}-nvme{k}.img")}
                    for k in range(drives)
                ]
            vms.append(vm)
    return vms


# ---- cluster ---------------------------------------------------------------------------------
LABEL_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def storage_names(storage: int) -> list[str]:
    return [f"s{i}" for i in range(1, storage + 1)]


def peer_address(vm: VmSpec) -> str:
    return f"{vm.addr}:{PEER_PORT}"


def default_labels(names: list[str]) -> dict[str, dict[str, str]]:
    """`--cluster` without --label: one rack per storage VM, s1 -> rack=a, s2 -> rack=b, ..."""
    return {n: {"rack": chr(ord("a") + i)} for i, n in enumerate(names)}


def parse_labels(specs: list[str] | tuple[str, ...], names: list[str]) -> dict[str, dict[str, str]]:
    """`VM:KEY=VALUE[,KEY=VALUE...]` options -> {vm: {key: value}} (pure; BadInput names the field)."""
    out: dict[str, dict[str, str]] = {}
    allowed = f"VM:KEY=VALUE with VM one of {', '.join(names)}, KEY [a-z0-9_.-], VALUE [A-Za-z0-9_.-]"
    for spec in specs:
        vm, sep, rest = spec.partition(":")
        if not sep or vm not in names or not rest:
            raise BadInput(f"label {spec!r} is not valid", field="label", allowed=allowed)
        for pair in rest.split(","):
            key, eq, value = pair.partition("=")
            if not eq or not LABEL_KEY_RE.match(key) or not LABEL_VALUE_RE.match(value):
                raise BadInput(f"label {spec!r} is not valid", field="label", allowed=allowed)
            out.setdefault(vm, {})[key] = value
    return out


def cluster_labels(
    cluster: bool, specs: list[str] | tuple[str, ...] | None, names: list[str]
) -> dict[str, dict[str, str]]:
    """The labels `up` applies: given ones, else the rack defaults; --label needs --cluster."""
    if not cluster:
        if specs:
            raise BadInput("--label needs --cluster", field="label", allowed="with --cluster only")
        return {}
    if specs is None:
        return default_labels(names)
    return parse_labels(specs, names)


def init_argv() -> list[str]:
    return ["nodeos", "cluster", "init", "--json"]


def join_argv(address: str) -> list[str]:
    """The join command; the token goes on its stdin (never on a command line: ps shows it)."""
    return ["nodeos", "cluster", "join", address, "--token-file", "-", "--json"]


def label_argv(node: str, labels: dict[str, str]) -> list[str]:
    return ["nodeos", "node", "label", node, *(f"{k}={v}" for k, v in sorted(labels.items())), "--json"]


def missing_members(status: dict[str, object], names: list[str]) -> list[str]:
    """Storage VMs not (yet) Raft members in `nodeos cluster status --json` (pure)."""
    members = status.get("members") if status.get("member") else None
    present = {
        m.get("name")
        for m in (members if isinstance(members, list) else [])
        if isinstance(m, dict) and m.get("raft") in ("voter", "learner")
    }
    return [n for n in names if n not in present]


def cluster_summary(status: dict[str, object]) -> dict[str, object]:
    """What `nodeos-lab status` shows of a cluster: leader (by member name) and members."""
    members = [m for m in status.get("members") or [] if isinstance(m, dict)]  # type: ignore[union-attr]
    members.sort(key=lambda m: (m.get("name") is None, str(m.get("name"))))  # s1, s2, ... not by Raft id
    by_id = {m.get("node_id"): m.get("name") for m in members}
    return {
        "cluster_id": status.get("cluster_id"),
        "leader": by_id.get(status.get("leader"), status.get("leader")),
        "term": status.get("term"),
        "members": [
            {
                "name": m.get("name"),
                "node_id": m.get("node_id"),
                "address": m.get("address"),
                "raft": m.get("raft"),
            }
            for m in members
        ],
    }
