"""The pure parts of `nodeos-lab up --cluster`: labels, CLI calls, membership check, status view,
and the VM's side (kernel command line -> nodeosd config) run by the real lab-init script."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from nodeos.errors import BadInput, EnvironmentProblem
from nodeos_devtools.lab import cluster as cluster_mod
from nodeos_devtools.lab import image, qemu
from nodeos_devtools.lab.plan import (
    PEER_PORT,
    cluster_labels,
    cluster_summary,
    default_labels,
    join_argv,
    label_argv,
    missing_members,
    parse_labels,
    plan_vms,
    storage_names,
)

NAMES = storage_names(3)


def test_default_labels_give_each_storage_vm_its_own_rack() -> None:
    assert NAMES == ["s1", "s2", "s3"]
    assert default_labels(NAMES) == {"s1": {"rack": "a"}, "s2": {"rack": "b"}, "s3": {"rack": "c"}}
    assert cluster_labels(True, None, NAMES) == default_labels(NAMES)
    assert cluster_labels(True, [], NAMES) == {}  # --no-labels
    assert cluster_labels(False, None, NAMES) == {}


def test_given_labels_replace_the_defaults_and_merge_per_vm() -> None:
    got = cluster_labels(True, ["s1:rack=x", "s2:rack=y,zone=z1", "s1:ssd=yes"], NAMES)
    assert got == {"s1": {"rack": "x", "ssd": "yes"}, "s2": {"rack": "y", "zone": "z1"}}


@pytest.mark.parametrize(
    "spec", ["s4:rack=a", "rack=a", "s1:", "s1:rack", "s1:rack=", "s1:Rack=a", "s1:rack=a b", "h1:rack=a"]
)
def test_bad_labels_name_the_field_and_the_form(spec: str) -> None:
    with pytest.raises(BadInput) as e:
        parse_labels([spec], NAMES)
    assert e.value.field == "label"
    assert "s1, s2, s3" in str(e.value.allowed)


def test_label_without_cluster_is_bad_input() -> None:
    with pytest.raises(BadInput) as e:
        cluster_labels(False, ["s1:rack=a"], NAMES)
    assert e.value.field == "label"


def test_cli_calls_are_the_documented_commands() -> None:
    assert join_argv("198.18.0.11:7100") == [
        "nodeos", "cluster", "join", "198.18.0.11:7100", "--token-file", "-", "--json",
    ]  # fmt: skip
    assert label_argv("s2", {"zone": "z", "rack": "b"}) == [
        "nodeos", "node", "label", "s2", "rack=b", "zone=z", "--json",
    ]  # fmt: skip


STATUS = {
    "member": True,
    "cluster_id": "c0ffee",
    "leader": 7,
    "term": 3,
    "members": [
        {"node_id": 4, "name": "s3", "address": "198.18.0.13:7100", "raft": "none"},
        {"node_id": 7, "name": "s1", "address": "198.18.0.11:7100", "raft": "voter"},
        {"node_id": 9, "name": "s2", "address": "198.18.0.12:7100", "raft": "learner"},
    ],
}


def test_members_are_missing_until_raft_knows_them() -> None:
    assert missing_members(STATUS, NAMES) == ["s3"]  # in the map, not yet in the Raft group
    assert missing_members(STATUS, ["s1", "s2"]) == []
    assert missing_members({"member": False, "members": []}, NAMES) == NAMES


def test_status_view_names_the_leader() -> None:
    view = cluster_summary(STATUS)
    assert view["leader"] == "s1" and view["term"] == 3
    assert [m["name"] for m in view["members"]] == NAMES  # type: ignore[index]  # by name, not Raft id


def test_storage_vms_get_their_peer_address_on_the_kernel_command_line(tmp_path: Path) -> None:
    s1, h1 = plan_vms("x", 2, storage=1, drives=1, hosts=1, drive_dir=tmp_path)
    assert f"nodeos.peer=198.18.2.11:{PEER_PORT}" in qemu.kernel_cmdline(s1, "tcg").split()
    assert "nodeos.peer" not in qemu.kernel_cmdline(h1, "tcg")


def test_lab_init_writes_nodeosd_config_with_vm_name_and_lab_address(tmp_path: Path) -> None:
    """The real guest script, with its system commands stubbed on PATH and / moved to tmp."""
    s1 = plan_vms("x", 2, storage=1, drives=1, hosts=0, drive_dir=tmp_path)[0]
    cmdline = tmp_path / "cmdline"
    cmdline.write_text(qemu.kernel_cmdline(s1, "tcg") + "\n")
    root = tmp_path / "root"
    script = (image.GUEST_DIR / "nodeos-lab-init.sh").read_text()
    for path in ("/proc/cmdline", "/etc/nvme", "/etc/nodeos", "/sys/class/net/eth0"):
        script = script.replace(path, f"{root}{path}" if path != "/proc/cmdline" else str(cmdline))
    (root / "sys/class/net/eth0").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ip", "modprobe", "mountpoint", "mount", "rdma"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    subprocess.run(["sh", "-c", script], check=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    cfg = tomllib.loads((root / "etc/nodeos/nodeosd.toml").read_text())
    assert cfg == {
        "node_name": "s1",
        "peer_listen": f"{s1.addr}:{PEER_PORT}",
        "storage_address": [s1.addr],
        "metrics_listen": "127.0.0.1:9810",
        "lease_s": 8.0,
        "raft_tick_ms": 300,  # TCG VMs stall for seconds: elections on a slower tick (docs/lab.md)
        "mdns_management": True,  # one lab network for peers and storage: advertised on it (issue 28)
    }
    # The daemon accepts it as it is.
    from nodeos.daemon import config

    loaded, _ = config.load(str(root / "etc/nodeos/nodeosd.toml"), {})
    assert loaded.node_name == "s1" and loaded.peer_listen == f"{s1.addr}:{PEER_PORT}"
    # ... including where it serves /metrics: never on the storage address.
    from nodeos.observe.service import listen_address

    assert listen_address(loaded.to_dict(), (s1.addr, PEER_PORT)) == ("127.0.0.1", 9810)


def test_labels_need_the_label_command() -> None:
    if cluster_mod.label_command_available():
        cluster_mod.need_label_command()  # no error once `nodeos node label` exists
        return
    with pytest.raises(EnvironmentProblem) as e:
        cluster_mod.need_label_command()
    assert "nodeos node label" in e.value.message and e.value.field == "label"
