"""A rebooted kernel-target node listens only once its exports are all back (nodeos/dataplane/kernel
nvmet.py, hold_links): nvmet listens on a port from its first link on, and a host reconnecting to a
subsystem not linked yet is refused with DNR, which a Linux host (6.12) takes as final. The rolling
upgrade's lab test saw it: each node back from its reboot took some of h1's paths away for good,
and after the third a 2-replica volume had none left (docs/benchmarks.md). configfs runs as a
directory shaped as the kernel makes it (test_kernel_discovery_anchor.py)."""

from __future__ import annotations

import os
from pathlib import Path

from nodeos.dataplane.base import Listener
from nodeos.dataplane.kernel.backend import KernelDataPlane
from nodeos.dataplane.kernel.nvmet import ANCHOR_NQN, PortAddr
from tests.unit.dataplane.test_kernel_discovery_anchor import DISC, OTHERS, KernelShapedConfigFs, _dp, _ports

VOL1 = "nqn.2014-08.io.nodeos:vol:00000000-0000-4000-8000-000000000001"
VOL2 = "nqn.2014-08.io.nodeos:vol:00000000-0000-4000-8000-000000000002"
DATA = Listener("tcp", "198.18.0.11", "4420")


def _export(dp: KernelDataPlane, nqn: str) -> None:
    """What apply_export does to ports once the subsystem and its namespace are made."""
    n = dp.nvmet
    n.ensure_subsystem(nqn, "NODEOS0001", 1, 100)
    addr = PortAddr.of(DATA)
    pid = n.ensure_port(addr)
    n.set_port_ana_state(pid, 1, "optimized")
    n.link_port(pid, nqn, addr)


def test_while_held_nothing_listens_and_the_release_links_every_export_at_once(tmp_path: Path) -> None:
    dp = _dp(tmp_path)
    dp.hold_listeners()
    _export(dp, VOL1)
    _export(dp, VOL2)
    dp.set_referrals(DISC, OTHERS)  # the agent's first pass: the discovery port's anchor
    assert _ports(tmp_path) and all(not linked for linked in _ports(tmp_path).values()), (
        "no subsystem linked while held: nvmet listens on no port, a host's reconnect is refused "
        "by TCP (it retries), not by the target (DNR)"
    )
    data_port = dp.nvmet.ensure_port(PortAddr.of(DATA))
    assert sorted(dp.nvmet.port_subsystems(data_port)) == [VOL1, VOL2], "what is held counts as linked"
    dp.release_listeners()
    assert sorted(map(sorted, _ports(tmp_path).values())) == [[ANCHOR_NQN], [VOL1, VOL2]]
    dp.release_listeners()  # nothing held: nothing happens
    dp.set_referrals(DISC, OTHERS)
    assert sorted(map(sorted, _ports(tmp_path).values())) == [[ANCHOR_NQN], [VOL1, VOL2]]


def test_an_export_removed_while_held_is_never_linked_and_its_port_goes(tmp_path: Path) -> None:
    dp = _dp(tmp_path)
    n = dp.nvmet
    n.hold_links()
    n.ensure_subsystem(VOL1, "NODEOS0001", 1, 100)
    pid = n.ensure_port(PortAddr.of(DATA))
    n.link_port(pid, VOL1, PortAddr.of(DATA))
    n.gc_port(pid)
    assert pid in n.ports(), "a port with a held link is in use"
    n.remove_subsystem(VOL1)
    assert n.ports() == {}, "its only (held) link went with it, and so did the port"
    n.release_links()
    assert _ports(tmp_path) == {} and os.listdir(tmp_path / "subsystems") == []


def test_a_demote_while_held_relinks_nothing_early(tmp_path: Path) -> None:
    """A fence or demote drops a subsystem's controllers by unlinking and linking it again."""
    dp = _dp(tmp_path)
    n = dp.nvmet
    n.ensure_subsystem(VOL1, "NODEOS0001", 1, 100)
    pid = n.ensure_port(PortAddr.of(DATA))
    n.hold_links()
    n.link_port(pid, VOL1, PortAddr.of(DATA))
    n.unlink_port(pid, VOL1)
    n.link_port(pid, VOL1, PortAddr.of(DATA))
    assert _ports(tmp_path) == {str(pid): set()}
    n.release_links()
    assert _ports(tmp_path) == {str(pid): {VOL1}}


class Journal(KernelShapedConfigFs):
    """Every configfs operation in order, as (what, path): which of them fall between a port's
    first link (it listens from then on) and its last."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.ops: list[tuple[str, str]] = []

    def _note(self, what: str, parts: tuple[str, ...]) -> None:
        self.ops.append((what, "/".join(parts)))

    def exists(self, *parts: str) -> bool:
        self._note("exists", parts)
        return super().exists(*parts)

    def listdir(self, *parts: str) -> list[str]:
        self._note("listdir", parts)
        return super().listdir(*parts)

    def read_or(self, default: str, *parts: str) -> str:
        self._note("read", parts)
        return super().read_or(default, *parts)

    def link(self, target: tuple[str, ...], *parts: str) -> None:
        self._note("link", parts)
        super().link(target, *parts)


def test_the_release_makes_each_ports_links_back_to_back(tmp_path: Path) -> None:
    """The lab's rolling upgrade lost two of h1's paths to one node at once after the hold: the
    release read the ports again before each link (seconds in a loaded VM), while the port
    already listened for the subsystems linked before. Between a port's first and last link,
    nothing but links."""
    (tmp_path / "ports").mkdir()
    (tmp_path / "subsystems").mkdir()
    fs = Journal(tmp_path)
    dp = KernelDataPlane(configfs=fs)
    dp.hold_listeners()
    disc = PortAddr.of(DISC)
    for nqn in (VOL1, VOL2):
        _export(dp, nqn)
        dp.nvmet.link_port(dp.nvmet.ensure_port(disc), nqn, disc)  # served on the discovery port too
    fs.ops.clear()
    dp.release_listeners()
    assert sorted(map(sorted, _ports(tmp_path).values())) == [[VOL1, VOL2], [VOL1, VOL2]]
    for port in _ports(tmp_path):
        mine = [
            i for i, (what, path) in enumerate(fs.ops) if what == "link" and path.startswith(f"ports/{port}/")
        ]
        between = fs.ops[mine[0] : mine[-1] + 1]
        assert len(mine) == 2 and {what for what, _ in between} == {"link"}, (
            f"port {port}: {between} between its first link and its last"
        )
