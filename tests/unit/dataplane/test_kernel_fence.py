"""The kernel data plane's fence of a front end (configfs edges over a directory tree shaped like
/sys/kernel/config/nvmet): the namespace moves into the inaccessible ANA group and the hosts'
controllers are dropped (the subsystem's port links remade: nvmet deletes their controllers) on
the way in, and with `drop_hosts` (a demote) also when it was inaccessible already. The kernel's
side (controllers really deleted, the host retrying elsewhere) is the lab's
(tests/lab/test_failover.py)."""

from __future__ import annotations

import os
from pathlib import Path

from nodeos.dataplane.kernel.backend import KernelDataPlane
from nodeos.dataplane.kernel.configfs import ConfigFs
from nodeos.dataplane.mirror_names import ANA_GROUP_INACCESSIBLE

NQN = "nqn.2014-08.io.nodeos:vol:v"


class LinkRecordingConfigFs(ConfigFs):
    """The real configfs edge over a directory tree; the port links it removes are recorded (a
    removed and remade symlink looks the same afterwards)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.unlinked: list[tuple[str, ...]] = []

    def unlink(self, *parts: str) -> None:
        self.unlinked.append(parts)
        super().unlink(*parts)


def _tree(root: Path) -> None:
    ns = root / "subsystems" / NQN / "namespaces" / "1"
    ns.mkdir(parents=True)
    (ns / "ana_grpid").write_text("1\n")
    (ns / "device_path").write_text("/dev/md/nodeos-0123\n")
    port = root / "ports" / "1"
    (port / "subsystems").mkdir(parents=True)
    for k, v in {"trtype": "tcp", "adrfam": "ipv4", "traddr": "198.18.0.1", "trsvcid": "4420"}.items():
        (port / f"addr_{k}").write_text(v + "\n")
    grp = port / "ana_groups" / str(ANA_GROUP_INACCESSIBLE)
    grp.mkdir(parents=True)
    (grp / "ana_state").write_text("optimized\n")
    os.symlink(root / "subsystems" / NQN, port / "subsystems" / NQN)


def test_hosts_controllers_are_dropped_on_the_way_in_and_with_drop_hosts_every_time(tmp_path: Path) -> None:
    _tree(tmp_path)
    fs = LinkRecordingConfigFs(tmp_path)
    dp = KernelDataPlane(configfs=fs)
    link = tmp_path / "ports" / "1" / "subsystems" / NQN
    grpid = tmp_path / "subsystems" / NQN / "namespaces" / "1" / "ana_grpid"

    assert dp.fence_export(NQN) is True
    assert grpid.read_text().strip() == str(ANA_GROUP_INACCESSIBLE)
    assert (tmp_path / "ports/1/ana_groups/2/ana_state").read_text().strip() == "inaccessible"
    assert fs.unlinked == [("ports", "1", "subsystems", NQN)] and os.path.islink(link)

    fs.unlinked.clear()
    assert dp.fence_export(NQN) is True  # the lease keeper's re-assert: inaccessible already
    assert fs.unlinked == []

    assert dp.fence_export(NQN, drop_hosts=True) is True  # a demote: dropped whatever the group
    assert fs.unlinked == [("ports", "1", "subsystems", NQN)] and os.path.islink(link)
    assert dp.fence_export("nqn.2014-08.io.nodeos:vol:absent", drop_hosts=True) is False
