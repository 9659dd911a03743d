"""Real-NIC fixtures: an mlx5-class port named by NODEOS_HW_NETDEV, skipped with a reason elsewhere.

These tests change the NIC's DCB settings and MTU and put them back afterwards. Run on a
lab server only:  NODEOS_HW_NETDEV=ens1f0 [NODEOS_HW_PEER=192.0.2.12] pytest hwtests/net
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

DCB_DRIVERS = {"mlx5_core", "ice", "i40e", "bnxt_en", "qede", "ixgbe"}


def _driver(netdev: str) -> str | None:
    link = Path(f"/sys/class/net/{netdev}/device/driver")
    return link.resolve().name if link.exists() else None


@pytest.fixture(scope="session")
def hw_netdev() -> str:
    name = os.environ.get("NODEOS_HW_NETDEV")
    if not name:
        pytest.skip("no real NIC named: set NODEOS_HW_NETDEV to an mlx5-class port (e.g. ens1f0)")
    if os.geteuid() != 0:
        pytest.skip("real-NIC tests need root")
    if not Path(f"/sys/class/net/{name}").exists():
        pytest.skip(f"NODEOS_HW_NETDEV={name} is not a network interface on this machine")
    drv = _driver(name)
    if drv not in DCB_DRIVERS:
        pytest.skip(
            f"{name} uses driver {drv}, not a DCB-capable NIC driver ({', '.join(sorted(DCB_DRIVERS))})"
        )
    for tool in ("dcb", "ethtool"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    return name


def dcb_json(*args: str) -> dict:
    out = subprocess.run(["dcb", "-j", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.fixture
def restore_dcb(hw_netdev: str) -> Iterator[None]:
    """Put ETS, PFC, APP and MTU back as they were, whatever the test did."""
    ets = dcb_json("ets", "show", "dev", hw_netdev)
    pfc = dcb_json("pfc", "show", "dev", hw_netdev)
    mtu = Path(f"/sys/class/net/{hw_netdev}/mtu").read_text().strip()
    try:
        yield
    finally:
        prio_tc = " ".join(f"{i}:{v}" for i, v in enumerate(ets.get("prio_tc", [])))
        tsa = " ".join(f"{i}:{v}" for i, v in enumerate(ets.get("tc_tsa", [])))
        bw = " ".join(f"{i}:{v}" for i, v in enumerate(ets.get("tc_bw", [])))
        if prio_tc:
            subprocess.run(
                f"dcb ets set dev {hw_netdev} prio-tc {prio_tc} tc-tsa {tsa} tc-bw {bw}",
                shell=True,
                check=False,
            )
        pfc_map = " ".join(f"{i}:{'on' if on else 'off'}" for i, on in enumerate(pfc.get("prio_pfc", [])))
        if pfc_map:
            subprocess.run(f"dcb pfc set dev {hw_netdev} prio-pfc {pfc_map}", shell=True, check=False)
        subprocess.run(["dcb", "app", "del", "dev", hw_netdev, "dscp-prio", "26:3", "48:6"], check=False)
        subprocess.run(["ip", "link", "set", hw_netdev, "mtu", mtu], check=False)
