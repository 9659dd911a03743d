"""Pure parts of the kernel backend: LVM commands and names, nvmet port planning."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeos.dataplane.base import Listener
from nodeos.dataplane.kernel import lvm
from nodeos.dataplane.kernel.nvmet import (
    PortAddr,
    discovery_addrs,
    find_port,
    free_port_id,
    nguid_for_configfs,
)
from nodeos.errors import BadInput


def test_lvm_names_round_trip() -> None:
    assert lvm.vg_name("p1") == "nodeos_p1" and lvm.pool_id_of("nodeos_p1") == "p1"
    assert lvm.lv_name("abc") == "v_abc" and lvm.vol_id_of("v_abc") == "abc"
    assert lvm.pool_id_of("debian-vg") is None and lvm.vol_id_of("tpool") is None


def test_lvm_refuses_reserved_and_unsafe_names() -> None:
    with pytest.raises(BadInput) as e:
        lvm.lv_name("x_tmeta")
    assert e.value.field == "vol_id"
    with pytest.raises(BadInput):
        lvm.vg_name("-ff")
    with pytest.raises(BadInput) as e2:
        lvm.cmd_snapshot("p1", "v1", "bad/name")
    assert e2.value.field == "snap_id"


def test_thin_commands() -> None:
    assert lvm.cmd_create_thin("p1", "v1", 1 << 30) == [
        "lvcreate",
        "--config",
        lvm.THIN_CHECK_CONFIG,
        "-y",
        "-n",
        "v_v1",
        "-V",
        "1073741824b",
        "--thinpool",
        "tpool",
        "--addtag",
        "nodeos_kind_volume",
        "--setactivationskip",
        "n",
        "nodeos_p1",
    ]
    assert lvm.cmd_snapshot("p1", "v1", "s1")[-1] == "nodeos_p1/v_v1"
    clone = lvm.cmd_clone("p1", "s1", "c1")
    assert clone[-1] == "nodeos_p1/v_s1" and "--setactivationskip" in clone and "nodeos_kind_clone" in clone
    assert lvm.cmd_extend("p1", "v1", 2 << 30)[-4:] == ["-y", "-L", "2147483648b", "nodeos_p1/v_v1"]


def test_every_command_that_may_activate_the_thin_pool_tolerates_a_leaked_block() -> None:
    """After a power loss thin_check's defaults refuse a pool with a leaked (harmless) block:
    "Check of pool ... failed (status:64). Manual repair required!" (lab: a volume create on a
    node just powered on). Every command that may activate the pool passes the tolerant options."""
    cmds = [
        lvm.cmd_create_thin("p1", "v1", 1 << 30),
        lvm.cmd_snapshot("p1", "v1", "s1"),
        lvm.cmd_clone("p1", "s1", "c1"),
        lvm.cmd_activate("p1", "v1"),
        lvm.cmd_extend("p1", "v1", 2 << 30),
        lvm.cmd_lvremove("p1", "v1"),
    ]
    for cmd in cmds:
        i = cmd.index("--config")
        assert "--ignore-non-fatal-errors" in cmd[i + 1] and "thin_check_options" in cmd[i + 1], cmd


def test_thin_pool_stripes_over_every_drive() -> None:
    one = lvm.cmd_thin_pool("p1", 1)
    assert "--stripes" not in one
    three = lvm.cmd_thin_pool("p1", 3)
    assert three[three.index("--stripes") + 1] == "3" and three[-1] == "nodeos_p1"


def test_lvm_error_message_keeps_the_reason() -> None:
    e = lvm.LvmError(["lvcreate", "x"], 5, '  WARNING: foo\n  Volume group "nodeos_p9" not found\n')
    assert "not found" in e.message and "WARNING" not in e.message and e.not_found


def test_port_planning() -> None:
    a = PortAddr("tcp", "ipv4", "10.0.0.1", "4420")
    b = PortAddr("rdma", "ipv4", "10.0.0.1", "4420")
    ports = {1: a, 3: b}
    assert find_port(ports, b) == 3
    assert find_port(ports, PortAddr("tcp", "ipv4", "10.0.0.2", "4420")) is None
    assert free_port_id(ports) == 2
    assert free_port_id({}) == 1


@given(st.sets(st.integers(1, 200), max_size=150))
def test_free_port_id_is_smallest_unused(used: set[int]) -> None:
    pid = free_port_id(used)
    assert pid not in used and all(i in used for i in range(1, pid))


def test_discovery_ports_one_per_address_and_transport() -> None:
    ls = (Listener("tcp", "10.0.0.1"), Listener("rdma", "10.0.0.1"), Listener("tcp", "10.0.0.1", "4421"))
    assert discovery_addrs(ls, "8009") == [
        PortAddr("tcp", "ipv4", "10.0.0.1", "8009"),
        PortAddr("rdma", "ipv4", "10.0.0.1", "8009"),
    ]
    assert discovery_addrs(ls, None) == []


def test_a_tls_only_export_gets_no_plain_discovery_port() -> None:
    # Linked to 8009, a volume whose hosts require TLS would take plain-text I/O connects there.
    ls = (Listener("tcp", "10.0.0.1", "4421"), Listener("tcp", "10.0.0.2", "4421"))
    assert discovery_addrs(ls, "8009") == []
    allowed = (Listener("tcp", "10.0.0.1", "4421"), Listener("tcp", "10.0.0.1"))
    assert discovery_addrs(allowed, "8009") == [PortAddr("tcp", "ipv4", "10.0.0.1", "8009")]


def test_nguid_written_in_the_form_configfs_prints() -> None:
    assert nguid_for_configfs("5b0e6f0a2c1d4e8f9a3b7c6d5e4f3a21") == "5b0e6f0a-2c1d-4e8f-9a3b-7c6d5e4f3a21"
