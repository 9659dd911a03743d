"""The shipped systemd unit: what an operator relies on when nodeosd fails or is attacked."""

from __future__ import annotations

import configparser
import tomllib
from pathlib import Path

from nodeos.daemon.config import Config
from nodeos.daemon.main import EXIT_CORRUPT_STATE
from nodeos_devtools.lab.image import SCRIPTS

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "nodeosd.service"


def service_section() -> configparser.SectionProxy:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string(UNIT.read_text())
    return cp["Service"]


def test_exits_a_restart_cannot_fix_are_not_restarted() -> None:
    codes = service_section()["RestartPreventExitStatus"].split()
    assert "2" in codes and str(EXIT_CORRUPT_STATE) in codes


def test_file_descriptor_limit_is_raised() -> None:
    assert int(service_section()["LimitNOFILE"]) >= 65536


def test_the_default_spdk_socket_is_visible_to_the_daemon() -> None:
    svc = service_section()
    private_tmp = svc.get("PrivateTmp", "no").lower() in ("yes", "true", "1", "disconnected")
    sock = Config().spdk_socket
    assert not (private_tmp and sock.startswith(("/tmp/", "/var/tmp/"))), (
        f"PrivateTmp hides {sock} (SPDK's default RPC socket) from nodeosd"
    )


def test_the_sandbox_keeps_what_the_daemon_needs_and_no_more_address_families() -> None:
    families = set(service_section()["RestrictAddressFamilies"].split())
    assert families == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}
    assert service_section()["RestrictNamespaces"] == "yes"


def test_capabilities_nothing_in_nodeos_uses_are_dropped() -> None:
    dropped = service_section()["CapabilityBoundingSet"]
    assert dropped.startswith("~")
    for cap in ("CAP_SYS_PTRACE", "CAP_SYS_BOOT", "CAP_BPF", "CAP_AUDIT_WRITE", "CAP_SYS_TIME"):
        assert cap in dropped.split()
    for needed in ("CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SYS_RAWIO", "CAP_SYS_MODULE", "CAP_IPC_LOCK"):
        assert needed not in dropped  # configfs/mounts, DCB, NVMe, modules, LVM's mlock


def test_every_stop_of_the_daemon_fences_its_replicated_front_ends_without_holding_back_a_restart() -> None:
    """nvmet and md outlive nodeosd: after a crash, kill -9, watchdog kill or stop, ExecStopPost
    fences (node/stopfence.py, installed as a console script and in the image) with the
    daemon's own configuration; "-": a failed fence (logged
    as critical) does not keep the unit from restarting."""
    svc = service_section()
    post = svc["ExecStopPost"].split()
    assert post[0] == "-/usr/bin/nodeos-fence", post
    assert post[1:] == svc["ExecStart"].split()[1:], "the fence reads the daemon's own config file"
    scripts = tomllib.loads((UNIT.parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["nodeos-fence"] == "nodeos.node.stopfence:main" == SCRIPTS["nodeos-fence"]
