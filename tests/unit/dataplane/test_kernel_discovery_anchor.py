"""A kernel-target node keeps answering discovery while it exports nothing (nodeos/dataplane/kernel
nvmet.py, ANCHOR_NQN): nvmet listens on a port only while a subsystem is linked to it, so a node
with no volume (new, drained, its volumes moved away) refused a host's discovery, and a host's
persistent discovery controller to it was lost for good. The configfs edge runs over a directory
tree shaped as the kernel makes it (attribute files and child directories appear on mkdir); that
the port then really listens, and that no host sees the anchor, is the lab's
(tests/lab/test_host_fabric.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from nodeos.dataplane.base import Listener
from nodeos.dataplane.kernel.backend import KernelDataPlane
from nodeos.dataplane.kernel.configfs import ConfigFs
from nodeos.dataplane.kernel.nvmet import ANCHOR_NQN, PortAddr

VOL = "nqn.2014-08.io.nodeos:vol:00000000-0000-4000-8000-000000000001"
DISC = Listener("tcp", "198.18.0.11", "8009")
OTHERS = (Listener("tcp", "198.18.0.12", "8009"), Listener("tcp", "198.18.0.13", "8009"))

ATTRS = {
    "port": {f"addr_{k}": "" for k in ("adrfam", "trtype", "traddr", "trsvcid", "tsas", "treq")},
    "subsystem": {
        "attr_allow_any_host": "0",
        "attr_serial": "",
        "attr_cntlid_min": "1",
        "attr_cntlid_max": "65519",
    },
    "referral": {**{f"addr_{k}": "" for k in ("adrfam", "trtype", "traddr", "trsvcid")}, "enable": "0"},
}
CHILDREN = {"port": ("subsystems", "referrals", "ana_groups/1"), "subsystem": ("namespaces", "allowed_hosts")}


class KernelShapedConfigFs(ConfigFs):
    """configfs as a directory: what the kernel makes on mkdir is made, and taken away on rmdir;
    an rmdir of a directory still holding a link or a made child fails, as configfs refuses it."""

    def _kind(self, parts: tuple[str, ...]) -> str:
        if len(parts) == 2:
            return {"ports": "port", "subsystems": "subsystem"}.get(parts[0], "")
        return "referral" if len(parts) == 4 and parts[2] == "referrals" else ""

    def mkdir(self, *parts: str) -> None:
        fresh = not self.exists(*parts)
        super().mkdir(*parts)
        kind = self._kind(parts)
        if not fresh or not kind:
            return
        for name, value in ATTRS[kind].items():
            (self.path(*parts) / name).write_text(value)
        for child in CHILDREN.get(kind, ()):
            (self.path(*parts) / child).mkdir(parents=True)
        if kind == "port":
            (self.path(*parts) / "ana_groups/1/ana_state").write_text("optimized")

    def rmdir(self, *parts: str) -> None:
        p = self.path(*parts)
        kind = self._kind(parts)
        if kind and p.is_dir():
            for child in CHILDREN.get(kind, ()):
                c = p / child.split("/")[0]
                if any(x.is_symlink() or x.is_dir() for x in c.iterdir() if x.name != "1"):
                    raise OSError(16, f"{c} is busy")
            for child in CHILDREN.get(kind, ()):
                shutil.rmtree(p / child.split("/")[0])
            for name in ATTRS[kind]:
                (p / name).unlink(missing_ok=True)
        super().rmdir(*parts)


def _dp(tmp_path: Path) -> KernelDataPlane:
    (tmp_path / "ports").mkdir()
    (tmp_path / "subsystems").mkdir()
    return KernelDataPlane(configfs=KernelShapedConfigFs(tmp_path))


def _ports(tmp_path: Path) -> dict[str, set[str]]:
    """port id -> the subsystems linked to it."""
    return {p.name: set(os.listdir(p / "subsystems")) for p in (tmp_path / "ports").iterdir()}


def test_a_node_exporting_nothing_keeps_its_discovery_port_with_an_anchor_no_host_may_use(
    tmp_path: Path,
) -> None:
    dp = _dp(tmp_path)
    dp.set_referrals(DISC, OTHERS)
    assert _ports(tmp_path) == {"1": {ANCHOR_NQN}}, "the port has a subsystem linked, so nvmet listens"
    anchor = tmp_path / "subsystems" / ANCHOR_NQN
    assert (anchor / "attr_allow_any_host").read_text() == "0"
    assert list((anchor / "allowed_hosts").iterdir()) == [] and list((anchor / "namespaces").iterdir()) == []
    assert [r.traddr for r in dp.list_referrals(DISC)] == ["198.18.0.12", "198.18.0.13"]
    assert dp.list_exports() == [], (
        "the anchor is no export: nothing reports it, nothing removes it as an orphan"
    )
    dp.set_referrals(DISC, OTHERS)  # idempotent
    assert _ports(tmp_path) == {"1": {ANCHOR_NQN}}


def test_the_port_stays_when_its_last_volume_goes_and_goes_with_its_referrals(tmp_path: Path) -> None:
    dp = _dp(tmp_path)
    n = dp.nvmet
    dp.set_referrals(DISC, OTHERS)
    n.ensure_subsystem(VOL, "NODEOS0001", 1, 100)  # a volume linked to the discovery port too
    n.link_port(1, VOL, PortAddr.of(DISC))
    assert [e.nqn for e in dp.list_exports()] == [VOL]
    dp.remove_export(VOL)
    assert _ports(tmp_path) == {"1": {ANCHOR_NQN}}, "the node's last volume went: discovery still answers"
    dp.set_referrals(DISC, ())  # alone in its cluster: nothing to refer to
    assert _ports(tmp_path) == {} and os.listdir(tmp_path / "subsystems") == [], "nvmet left empty"


def test_the_anchor_goes_only_when_no_discovery_port_holds_it(tmp_path: Path) -> None:
    dp = _dp(tmp_path)
    rdma = Listener("rdma", "198.18.1.11", "8009")
    dp.set_referrals(DISC, OTHERS)
    dp.set_referrals(rdma, (Listener("rdma", "198.18.1.12", "8009"),))
    dp.set_referrals(DISC, ())
    assert list(_ports(tmp_path).values()) == [{ANCHOR_NQN}], "the RDMA discovery port keeps it"
    assert (tmp_path / "subsystems" / ANCHOR_NQN).is_dir()
    dp.set_referrals(rdma, ())
    assert _ports(tmp_path) == {} and os.listdir(tmp_path / "subsystems") == []
