"""The lab's identity hook is a user of provisioning: nodeos-lab puts provisioning's own words on
a storage VM's kernel command line; the real guest script (nodeos-lab-init.sh, its system
commands stubbed on PATH and / moved to a temporary root) writes the lab's own settings, then
the image's nodeos-provision.service (ordered after it) applies the words with its own command
line. No VM is booted."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

from nodeos.provision import sources
from nodeos.provision.apply import check_found
from nodeos_devtools.lab import image, qemu
from nodeos_devtools.lab.plan import plan_vms
from nodeos_devtools.lab.qemu import PEER_PORT

NODEOS = Path(sys.executable).parent / "nodeos"


def test_a_storage_vms_command_line_is_a_valid_configuration(tmp_path: Path) -> None:
    s1, h1 = plan_vms("x", 2, storage=1, drives=1, hosts=1, drive_dir=tmp_path)
    found = sources.from_cmdline(qemu.kernel_cmdline(s1, "tcg"))
    assert found is not None
    plan = check_found(found)
    assert plan.hostname == "s1" and plan.storage_addresses == (s1.addr,)
    assert plan.peer_listen == f"{s1.addr}:{PEER_PORT}"
    assert [(i.name, i.addresses) for i in plan.interfaces] == [("eth0", (s1.ip,))]
    assert sources.from_cmdline(qemu.kernel_cmdline(h1, "tcg")) is None, "hosts run no nodeos"


def _run_lab_init(tmp_path: Path, cmdline: Path, root: Path) -> None:
    script = (image.GUEST_DIR / "nodeos-lab-init.sh").read_text()
    for path in ("/proc/cmdline", "/etc/nvme", "/etc/nodeos", "/sys/class/net/eth0"):
        script = script.replace(path, f"{root}{path}" if path != "/proc/cmdline" else str(cmdline))
    (root / "sys/class/net/eth0").mkdir(parents=True, exist_ok=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("ip", "modprobe", "mountpoint", "mount", "rdma"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    r = subprocess.run(
        ["sh", "-c", script],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    # Then the unit, as systemd runs it after lab-init, pointed at the test's root.
    unit = (Path(image.PROJECT_DIR) / "systemd" / "nodeos-provision.service").read_text()
    (exec_start,) = [ln.split("=", 1)[1] for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    argv = [str(NODEOS), *shlex.split(exec_start)[1:]]
    argv += [
        "--root",
        str(root),
        "--state-dir",
        f"{root}/var/lib/nodeos",
        "--cmdline-file",
        str(cmdline),
        "--credentials-dir",
        f"{tmp_path}/nocreds",
        "--partition-dir",
        f"{tmp_path}/nocfg",
        "--runtime-dir",
        f"{tmp_path}/run",
    ]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_image_installs_the_provisioning_units_after_lab_init() -> None:
    names = [p.name for p in image.extra_unit_files()]
    # Both provisioning units, and the node's own SSH host keys (docs/image.md): every unit of
    # systemd/ the image installs besides nodeosd's and the health gate.
    assert names == [
        "nodeos-provision.service",
        "nodeos-provision-cluster.service",
        "nodeos-ssh-hostkeys.service",
    ]
    lab_init = (image.GUEST_DIR / "nodeos-lab-init.service").read_text()
    assert "nodeos-provision.service" in lab_init.split("Before=", 1)[1].splitlines()[0]


def test_lab_init_and_provisioning_give_the_vm_its_identity(tmp_path: Path) -> None:
    s1 = plan_vms("x", 2, storage=1, drives=1, hosts=0, drive_dir=tmp_path)[0]
    cmdline = tmp_path / "cmdline"
    cmdline.write_text(qemu.kernel_cmdline(s1, "tcg") + "\n")
    root = tmp_path / "root"
    _run_lab_init(tmp_path, cmdline, root)

    conf_text = (root / "etc/nodeos/nodeosd.toml").read_text()
    assert "written by `nodeos provision` from the kernel command line" in conf_text
    conf = tomllib.loads(conf_text)
    assert {k: conf.pop(k) for k in ("node_name", "peer_listen", "storage_address")} == {
        "node_name": "s1",
        "peer_listen": f"{s1.addr}:{PEER_PORT}",
        "storage_address": [s1.addr],
    }
    # The lab's own settings, kept as lab-init wrote them.
    assert (
        conf["metrics_listen"] == "127.0.0.1:9810" and conf["lease_s"] == 8.0 and conf["raft_tick_ms"] == 300
    )
    from nodeos.daemon import config

    loaded, _ = config.load(str(root / "etc/nodeos/nodeosd.toml"), {})
    assert loaded.node_name == "s1" and loaded.peer_listen == f"{s1.addr}:{PEER_PORT}"
    net = (root / "etc/systemd/network/50-nodeos-eth0.network").read_text()
    assert f"Address={s1.ip}" in net
    st = json.loads((root / "var/lib/nodeos/provision/state.json").read_text())
    assert st["result"] == "applied" and st["source"] == "the kernel command line"

    _run_lab_init(tmp_path, cmdline, root)  # a second boot: the same files
    assert (root / "etc/nodeos/nodeosd.toml").read_text() == conf_text
