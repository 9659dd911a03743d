"""roce-lossless on a real DCB-capable NIC: apply, read back with `dcb -j` and ethtool, counters move."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeos.net.watch import read_ethtool_stats

CONFIG = """
[[interfaces]]
name = "{netdev}"
mtu = 9000
[qos]
profile = "roce-lossless"
roce_priority = 3
roce_dscp = 26
cnp_dscp = 48
"""


def dcb_json(*args: str) -> dict:
    out = subprocess.run(["dcb", "-j", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def nodeos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeos.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def config(tmp_path: Path, hw_netdev: str) -> Path:
    p = tmp_path / "net.toml"
    p.write_text(CONFIG.format(netdev=hw_netdev))
    return p


def test_apply_then_dcb_tool_reads_back_the_profile(hw_netdev: str, config: Path, restore_dcb: None) -> None:
    res = nodeos("net", "apply", "--config", str(config), "--yes", "--json")
    assert res.returncode == 0, res.stderr
    ets = dcb_json("ets", "show", "dev", hw_netdev)
    assert ets["prio_tc"][3] == 3 and ets["prio_tc"][6] == 6
    assert ets["tc_tsa"][6] == "strict" and ets["tc_tsa"][3] == "ets"
    assert ets["tc_bw"][3] + ets["tc_bw"][0] == 100
    pfc = dcb_json("pfc", "show", "dev", hw_netdev)
    assert [i for i, on in enumerate(pfc["prio_pfc"]) if on] == [3]
    app = dcb_json("app", "show", "dev", hw_netdev, "dscp-prio")
    pairs = {(e[0], e[1]) for e in app["dscp_prio"]}
    assert {(26, 3), (48, 6)} <= pairs
    assert Path(f"/sys/class/net/{hw_netdev}/mtu").read_text().strip() == "9000"
    assert nodeos("net", "verify", "--config", str(config)).returncode == 0


def test_drift_made_with_dcb_tool_is_reported(hw_netdev: str, config: Path, restore_dcb: None) -> None:
    assert nodeos("net", "apply", "--config", str(config), "--yes").returncode == 0
    subprocess.run(["dcb", "pfc", "set", "dev", hw_netdev, "prio-pfc", "all:off"], check=True)
    res = nodeos("net", "verify", "--config", str(config), "--json")
    assert res.returncode == 3 and f"{hw_netdev} pfc" in res.stdout


def test_pfc_counters_move_under_traffic(hw_netdev: str, config: Path, restore_dcb: None) -> None:
    """Needs a RoCE peer (NODEOS_HW_PEER, running `ib_write_bw` as server) behind a PFC switch."""
    peer = os.environ.get("NODEOS_HW_PEER")
    if not peer:
        pytest.skip("set NODEOS_HW_PEER to a RoCE peer address to drive traffic through the lossless class")
    assert nodeos("net", "apply", "--config", str(config), "--yes").returncode == 0
    before = read_ethtool_stats(hw_netdev)
    assert "rx_prio3_pause" in before, "driver exposes no per-priority pause counters"
    subprocess.run(
        ["ib_write_bw", "--report_gbits", "-D", "10", "-q", "8", "--tclass", "106", peer],
        check=True,
        timeout=120,
    )
    after = read_ethtool_stats(hw_netdev)
    moved = [k for k in ("tx_prio3_packets", "tx_prio3_bytes") if after.get(k, 0) > before.get(k, 0)]
    assert moved, "no traffic counted on priority 3: DSCP trust or the app table is not in effect"
