"""Volume I/O counters as the kernel and SPDK report them."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeos.observe import iostat


def test_block_stat_fields_in_operator_units() -> None:
    # /sys/block/<dev>/stat: reads merged sectors ticks writes merged sectors ticks in_flight ...
    line = "  100  0  800  40  50  0  1024  90  3  120  130  0  0  0  0  7  5\n"
    got = iostat.parse_block_stat(line)
    assert got == {
        "reads": 100,
        "read_bytes": 800 * 512,
        "read_seconds": 0.04,
        "writes": 50,
        "write_bytes": 1024 * 512,
        "write_seconds": 0.09,
        "in_flight": 3,
    }


def test_a_real_block_device_of_this_machine_parses(tmp_path: Path) -> None:
    devs = [p for p in Path("/sys/block").glob("*") if (p / "stat").exists()]
    if not devs:
        pytest.skip("no block devices visible in /sys/block")
    target = tmp_path / "disk"
    target.symlink_to(f"/dev/{devs[0].name}")  # a /dev/vg/lv-like symlink to the kernel name
    got = iostat.read_block_stats({"vol": str(target)})
    assert got["vol"]["reads"] >= 0 and got["vol"]["write_bytes"] % 512 == 0


def test_a_vanished_device_is_left_out() -> None:
    assert iostat.read_block_stats({"gone": "/dev/nodeos-no-such-device"}) == {}
    with pytest.raises(ValueError):
        iostat.parse_block_stat("1 2 3")


def test_spdk_iostat_maps_bdevs_to_volumes_by_name_or_alias() -> None:
    result = {
        "tick_rate": 2_000_000_000,
        "bdevs": [
            {
                "name": "a1b2",
                "aliases": ["lvs_p1/v1"],
                "bytes_read": 4096,
                "num_read_ops": 1,
                "bytes_written": 8192,
                "num_write_ops": 2,
                "read_latency_ticks": 2_000_000,
                "write_latency_ticks": 4_000_000_000,
            },
            {"name": "Nvme0n1", "bytes_read": 1, "num_read_ops": 1},
        ],
    }
    got = iostat.parse_spdk_iostat(result, {"lvs_p1/v1": "v1"})
    assert set(got) == {"v1"}
    assert got["v1"]["writes"] == 2 and got["v1"]["write_bytes"] == 8192
    assert got["v1"]["read_seconds"] == pytest.approx(0.001)
    assert got["v1"]["write_seconds"] == pytest.approx(2.0)
