"""nvmet's namespace 1 on the kernel data plane (nodeos/dataplane/kernel/nvmet.py), over a
directory standing in for configfs: withheld from the hosts (`enable` 0) and back, its device
and ids kept, the subsystem untouched."""

from __future__ import annotations

from pathlib import Path

from nodeos.dataplane.kernel.configfs import ConfigFs
from nodeos.dataplane.kernel.nvmet import Nvmet

NQN = "nqn.2014-08.io.nodeos:vol:00000000-0000-4000-8000-000000000001"
NGUID = "00000000000040008000000000000001"


def test_a_namespace_withheld_and_given_back_keeps_its_device_and_ids(tmp_path: Path) -> None:
    ns = tmp_path / "subsystems" / NQN / "namespaces" / "1"
    ns.mkdir(parents=True)  # configfs makes its attributes with the directory
    for attr, value in (
        ("device_path", ""),
        ("device_uuid", ""),
        ("device_nguid", ""),
        ("ana_grpid", "1"),
        ("enable", "0"),
    ):
        (ns / attr).write_text(value + "\n")
    n = Nvmet(ConfigFs(tmp_path))
    n.ensure_namespace(NQN, "/dev/mapper/front", "00000000-0000-4000-8000-000000000001", NGUID, 2)
    assert (ns / "enable").read_text().strip() == "1"
    n.ensure_namespace(
        NQN, "/dev/mapper/front", "00000000-0000-4000-8000-000000000001", NGUID, 2, enable=False
    )
    assert (ns / "enable").read_text().strip() == "0"
    assert (ns / "device_path").read_text().strip() == "/dev/mapper/front"
    assert (ns / "ana_grpid").read_text().strip() == "2"
    n.ensure_namespace(
        NQN, "/dev/mapper/front", "00000000-0000-4000-8000-000000000001", NGUID, 2, enable=False
    )
    assert (ns / "enable").read_text().strip() == "0"  # idempotent
    n.ensure_namespace(NQN, "/dev/mapper/front", "00000000-0000-4000-8000-000000000001", NGUID, 2)
    assert (ns / "enable").read_text().strip() == "1"
