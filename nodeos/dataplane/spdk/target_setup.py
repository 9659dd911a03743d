"""nodeos-spdk-setup: what the SPDK target's unit (systemd/nodeos-spdk.service) runs around
`nvmf_tgt --wait-for-rpc`.

    nodeos-spdk-setup hugepages --mib N    ExecStartPre: reserve N MiB of 2 MiB hugepages
    nodeos-spdk-setup init --max-subsystems N [--socket P]
                                           ExecStartPost: wait for the RPC socket, then
                                           nvmf_set_max_subsystems N, framework_start_init,
                                           framework_wait_init
    nodeos-spdk-setup wanted [--config F]  ExecCondition: exit 0 when this node runs the SPDK
                                           data plane (nodeosd.toml's `dataplane`; `auto`:
                                           the node has NVMe drives), 1 (unit skipped) if not

SPDK takes its subsystem limit (default 1,024: one subsystem per exported volume) only before
its framework starts, hence `--wait-for-rpc` and this step; a target already started (the step
run again) is left as it is. Units ordered after the target (nodeosd) start once this is done.
Defaults come from the environment (the unit's EnvironmentFile, /etc/nodeos/spdk.env):
SPDK_HUGEMEM_MIB, SPDK_MAX_SUBSYSTEMS, SPDK_RPC_SOCKET.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from nodeos.errors import BadInput, NodeosError

DEFAULT_SOCKET = "/var/tmp/spdk.sock"
DEFAULT_MAX_SUBSYSTEMS = 16384  # issue 12: 10,000 volumes on one target, with room
DEFAULT_HUGEMEM_MIB = 4096
DEFAULT_CONFIG = "/etc/nodeos/nodeosd.toml"  # = nodeos.daemon.config.DEFAULT_CONFIG
HUGEPAGES = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
Request = tuple[str, dict[str, Any]]


def hugepages_count(mib: int, page_kib: int = 2048) -> int:
    """How many hugepages hold `mib` MiB (rounded up)."""
    if type(mib) is not int or mib < 0:
        raise BadInput(f"hugepage memory must be a whole number of MiB, not {mib!r}", field="mib")
    return -(-mib * 1024 // page_kib)


def init_requests(max_subsystems: int) -> list[Request]:
    """The calls that take a `--wait-for-rpc` target to running with the given subsystem limit."""
    if type(max_subsystems) is not int or not 1 <= max_subsystems <= 65535:
        raise BadInput(
            f"max_subsystems must be 1..65535, not {max_subsystems!r}",
            field="max_subsystems",
            allowed="1..65535 (the discovery subsystem counts too)",
        )
    return [
        ("nvmf_set_max_subsystems", {"max_subsystems": max_subsystems}),
        ("framework_start_init", {}),
        ("framework_wait_init", {}),
    ]


def started(methods_now: list[str]) -> bool:
    """rpc_get_methods current=true: a target waiting for RPC still offers framework_start_init."""
    return "framework_start_init" not in methods_now


def init(socket_path: str, max_subsystems: int, wait_s: float = 60.0) -> str:
    from nodeos.dataplane.spdk.client import SpdkRpc, SpdkRpcError
    from nodeos.dataplane.spdk.errors import map_error
    from nodeos.errors import EnvironmentProblem

    calls = init_requests(max_subsystems)
    rpc = SpdkRpc(socket_path, timeout=wait_s)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            now = [str(m) for m in rpc.call("rpc_get_methods", {"current": True}) or []]
            break
        except EnvironmentProblem:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
    try:
        if started(now):
            return f"the target on {socket_path} is running already; its subsystem limit stays as it is"
        for method, params in calls:
            try:
                rpc.call(method, params)
            except SpdkRpcError as e:
                raise map_error(e.method, e.params, e.code, e.message) from None
        return f"the target on {socket_path} is running, at most {max_subsystems} subsystems"
    finally:
        rpc.close()


def configured_dataplane(config: Path) -> str:
    """nodeosd.toml's `dataplane` (absent file or key: auto). A file nodeosd would refuse is
    nodeosd's to report; here it counts as not asking for SPDK."""
    if not config.exists():
        return "auto"
    try:
        value = tomllib.loads(config.read_text()).get("dataplane", "auto")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return "invalid"
    return value if isinstance(value, str) else "invalid"


def wanted(config: Path, drives: list[str]) -> tuple[bool, str]:
    """Whether the target should run on this node (it runs only where the image carries it:
    the unit's ConditionPathExists), decided as nodeosd decides (select.auto_choice)."""
    from nodeos.dataplane.select import auto_choice

    plane = configured_dataplane(config)
    if plane == "spdk":
        return True, f"{config} pins the SPDK data plane"
    if plane != "auto":
        return False, f"{config} sets dataplane {plane!r}: the SPDK target is not started"
    backend, why = auto_choice(False, True, drives)
    return backend == "spdk", why


def hugetlbfs_mounted(mounts: str) -> bool:
    """Whether /proc/self/mounts lists a hugetlbfs (DPDK maps the target's memory through one)."""
    return any(len(f) > 2 and f[2] == "hugetlbfs" for f in (ln.split() for ln in mounts.splitlines()))


def ensure_hugetlbfs(mounts: Path = Path("/proc/self/mounts"), where: Path = Path("/dev/hugepages")) -> str:
    """Mount hugetlbfs at /dev/hugepages where nothing did (systemd's dev-hugepages.mount does
    on a server; the lab masks it): without one the target's EAL finds no hugepages."""
    if hugetlbfs_mounted(mounts.read_text()):
        return ""
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "hugetlbfs", "nodev", str(where)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise NodeosError(f"no hugetlbfs mounted and mounting one at {where} failed: {proc.stderr.strip()}")
    return f"; hugetlbfs mounted at {where}"


def reserve_hugepages(mib: int, path: Path = HUGEPAGES) -> str:
    want = hugepages_count(mib)
    have = int(path.read_text().strip() or 0)
    if have < want:
        path.write_text(str(want))
        have = int(path.read_text().strip() or 0)
    if have < want:
        raise NodeosError(f"only {have} of {want} 2 MiB hugepages could be reserved ({mib} MiB wanted)")
    return f"{have} hugepages of 2 MiB reserved ({mib} MiB wanted)"


def parser(env: dict[str, str] | os._Environ[str] = os.environ) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="nodeos-spdk-setup", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    hp = sub.add_parser("hugepages", help="reserve hugepages for the target (ExecStartPre)")
    hp.add_argument("--mib", type=int, default=int(env.get("SPDK_HUGEMEM_MIB", DEFAULT_HUGEMEM_MIB)))
    it = sub.add_parser("init", help="set the subsystem limit and start the framework (ExecStartPost)")
    it.add_argument(
        "--max-subsystems", type=int, default=int(env.get("SPDK_MAX_SUBSYSTEMS", DEFAULT_MAX_SUBSYSTEMS))
    )
    it.add_argument("--socket", default=env.get("SPDK_RPC_SOCKET", DEFAULT_SOCKET))
    it.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the RPC socket")
    wt = sub.add_parser("wanted", help="exit 0 if this node runs the SPDK data plane (ExecCondition)")
    wt.add_argument("--config", type=Path, default=Path(DEFAULT_CONFIG))
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        if a.cmd == "hugepages":
            print(reserve_hugepages(a.mib) + ensure_hugetlbfs())
        elif a.cmd == "wanted":
            from nodeos.dataplane.select import nvme_drives

            yes, why = wanted(a.config, nvme_drives())
            print(why)
            return 0 if yes else 1
        else:
            print(init(a.socket, a.max_subsystems, a.wait))
    except NodeosError as e:
        print(f"nodeos-spdk-setup: {e.message}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        print(f"nodeos-spdk-setup: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
