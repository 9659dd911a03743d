"""The lab's pure parts (no VMs): plan, input checks, QEMU command lines, guest agent framing."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from nodeos.errors import BadInput
from nodeos_devtools.lab import qemu
from nodeos_devtools.lab.plan import check_counts, check_name, plan_vms, subnet_of
from nodeos_devtools.lab.qga import GuestAgent


def test_plan_gives_each_vm_its_own_address_mac_identity_and_serials(tmp_path: Path) -> None:
    vms = plan_vms("x", 300, storage=2, drives=3, hosts=2, drive_dir=tmp_path)
    assert [v.name for v in vms] == ["s1", "s2", "h1", "h2"]
    assert [v.addr for v in vms] == ["198.19.44.11", "198.19.44.12", "198.19.44.101", "198.19.44.102"]
    assert len({v.mac for v in vms}) == len({v.hostnqn for v in vms}) == len({v.hostid for v in vms}) == 4
    assert [d["serial"] for d in vms[1].drives] == ["NODEOS-s2-0", "NODEOS-s2-1", "NODEOS-s2-2"]
    assert vms[2].drives == [] and vms[2].role == "host"
    assert all(v.hostnqn == f"nqn.2014-08.org.nvmexpress:uuid:{v.hostid}" for v in vms)
    # Stable across restarts of the same lab, different in another lab.
    again = plan_vms("x", 300, storage=2, drives=3, hosts=2, drive_dir=tmp_path)
    assert [v.hostid for v in again] == [v.hostid for v in vms]
    other = plan_vms("y", 300, storage=2, drives=3, hosts=2, drive_dir=tmp_path)
    assert not {v.hostid for v in other} & {v.hostid for v in vms}


def test_subnets_stay_inside_the_benchmark_range() -> None:
    assert subnet_of(0) == "198.18.0" and subnet_of(255) == "198.18.255" and subnet_of(511) == "198.19.255"


@pytest.mark.parametrize(
    ("counts", "field"),
    [
        ((0, 1, 0, 1024), "storage"),
        ((9, 1, 0, 1024), "storage"),
        ((1, 0, 0, 1024), "drives"),
        ((1, 9, 0, 1024), "drives"),
        ((1, 1, -1, 1024), "hosts"),
        ((1, 1, 9, 1024), "hosts"),
        ((1, 1, 0, 63), "drive_size_mib"),
        ((True, 1, 0, 1024), "storage"),
    ],
)
def test_counts_out_of_range_name_the_field_and_the_range(
    counts: tuple[int, int, int, int], field: str
) -> None:
    with pytest.raises(BadInput) as e:
        check_counts(*counts)
    assert e.value.field == field and ".." in str(e.value.allowed)


@pytest.mark.parametrize("name", ["", "A", "-x", "x" * 17, "a_b", "a b", "a/b"])
def test_bad_lab_names(name: str) -> None:
    with pytest.raises(BadInput) as e:
        check_name(name)
    assert e.value.field == "name"


def test_command_line_storage_vm(tmp_path: Path) -> None:
    s1, h1 = plan_vms("x", 1, storage=1, drives=2, hosts=1, drive_dir=tmp_path)
    argv = qemu.command_line(
        "qemu", s1, accel="tcg", kernel=Path("/k"), initrd=Path("/i"), rootfs=Path("/r"),
        vm_dir=tmp_path, tap="tap-s1", tag="nodeos-lab-x-s1",
    )  # fmt: skip
    joined = " ".join(argv)
    assert "tcg,thread=multi" in joined and "-enable-kvm" not in joined
    assert "file=/r,if=virtio,format=raw,snapshot=on" in joined
    assert "nvme,serial=NODEOS-s1-0,drive=nvm0" in joined and "nvme,serial=NODEOS-s1-1,drive=nvm1" in joined
    drive_args = [a for a in argv if "if=none,id=nvm" in a]
    assert len(drive_args) == 2 and not any("snapshot" in a for a in drive_args)  # drives persist
    # Each NVMe controller behind a root port of its own, with an id: hot-unpluggable.
    assert "nvme,serial=NODEOS-s1-1,drive=nvm1,bus=rp1,id=nvme1" in argv
    assert "pcie-root-port,id=rp1,chassis=2" in argv
    assert "org.qemu.guest_agent.0" in joined and "ifname=tap-s1" in joined
    append = argv[argv.index("-append") + 1]
    assert (
        f"nodeos.ip={s1.ip}" in append
        and "nodeos.role=storage" in append
        and "nvme_core.multipath" not in append
    )
    host_append = qemu.kernel_cmdline(h1, "kvm")
    assert "nvme_core.multipath=Y" in host_append and "nodeos.role=host" in host_append
    assert "systemd.mask=nodeosd.service" in host_append and "systemd.mask=nodeosd" not in append
    kvm = qemu.command_line(
        "qemu", h1, accel="kvm", kernel=Path("/k"), initrd=Path("/i"), rootfs=Path("/r"),
        vm_dir=tmp_path, tap="tap-h1", tag="t",
    )  # fmt: skip
    assert "kvm" in kvm and "nvme," not in " ".join(kvm)


def test_guest_agent_skips_stale_replies_and_0xff_until_its_sync_id(tmp_path: Path) -> None:
    """A real unix socket served like qemu-guest-agent, with a reply left over from before."""
    path = tmp_path / "qga.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.sendall(b'{"return": {"stale": true}}\n')  # left by an earlier client
            buf = b""
            dec = json.JSONDecoder()
            answered = 0
            while answered < 2:
                buf += conn.recv(4096)
                try:
                    msg, end = dec.raw_decode(buf.decode())
                except json.JSONDecodeError:
                    continue
                buf = buf[end:]
                if msg["execute"] == "guest-sync-delimited":
                    conn.sendall(b'\xff{"return": 12345}\n')  # a stale sync id first
                    conn.sendall(b'\xff{"return": %d}\n' % msg["arguments"]["id"])
                else:
                    conn.sendall(b'{"return": {}}\n')
                answered += 1

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert GuestAgent(path).ping(timeout=5)
    t.join(5)
    srv.close()


def test_guest_agent_absent_socket_is_unavailable(tmp_path: Path) -> None:
    assert not GuestAgent(tmp_path / "none.sock").ping(timeout=1)
