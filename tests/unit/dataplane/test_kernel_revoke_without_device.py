"""A revoke reaches the target while the volume's device is gone (a pulled drive): before, the
grant step failed at the LV lookup and the revoked host kept its access (and its connection) on
that node until the drive came back and a later pass applied the export whole. The host side is
now applied alone (`revoke_hosts`, nodeos/dataplane/kernel/exports.py; the node's grant step,
nodeos/node/ops.py), and the step still fails: the export is not whole. configfs is the
kernel-shaped directory of test_kernel_discovery_anchor; LVM (not installed here) stands in as a
pool whose drive is gone: it lists no LV."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nodeos.dataplane.base import Listener
from nodeos.dataplane.kernel import lvm
from nodeos.dataplane.kernel.backend import KernelDataPlane
from nodeos.errors import NotFound
from nodeos.node.ops import Ops
from nodeos.store.lmdb_store import Store
from tests.unit.dataplane.test_kernel_discovery_anchor import KernelShapedConfigFs
from tests.unit.node.test_orphan_ops import _direct, store  # noqa: F401 (store: a fixture)

UUID = "00000000-0000-4000-8000-0000000000aa"
NQN = f"nqn.2014-08.io.nodeos:vol:{UUID}"
H1, H2 = "nqn.2014-08.org.nvmexpress:uuid:h1", "nqn.2014-08.org.nvmexpress:uuid:h2"
LISTEN = (Listener("tcp", "198.18.0.11", "4420"),)


class PoolGone(lvm.LvmRunner):
    """The pool's VG with its drive pulled: `lvs` finds nothing (LvmRunner.lvs turns LVM's
    "volume group not found" into [])."""

    def lvs(self, pool_id: str | None = None) -> list[lvm.Lv]:
        return []


def _dp(tmp_path: Path) -> KernelDataPlane:
    for d in ("ports", "subsystems", "hosts"):
        (tmp_path / d).mkdir()
    dp = KernelDataPlane(configfs=KernelShapedConfigFs(tmp_path), runner=PoolGone())
    n = dp.nvmet
    n.ensure_subsystem(NQN, "NODEOS00AA", 1, 100)  # exported while the drive was there
    for h in (H1, H2):
        n.ensure_host(h, None)
        n.allow_host(NQN, h)
    return dp


def test_revoke_hosts_takes_access_away_and_touches_nothing_else(tmp_path: Path) -> None:
    dp = _dp(tmp_path)
    assert dp.revoke_hosts(NQN, [H1]) == [H2]
    assert dp.nvmet.allowed_hosts(NQN) == [H1]
    assert not (tmp_path / "hosts" / H2).exists(), "a host no subsystem allows is gone"
    assert dp.revoke_hosts(NQN, [H1]) == []  # idempotent
    with pytest.raises(NotFound) as err:
        dp.revoke_hosts(NQN.replace("aa", "bb"), [])
    assert err.value.field == "nqn"


def _record(hosts: list[str]) -> dict[str, Any]:
    return {
        "name": "v", "uuid": UUID, "nqn": NQN, "serial": "NODEOS00AA", "nguid": UUID.replace("-", ""),
        "pool_id": "p1", "vol_id": "v" + UUID.replace("-", ""), "size_bytes": 1 << 30,
        "hosts": hosts, "state": "exporting",
    }  # fmt: skip


def test_a_revoke_on_a_node_whose_drive_is_gone_takes_effect_and_the_step_still_fails(
    tmp_path: Path,
    store: Store,  # noqa: F811
) -> None:
    dp = _dp(tmp_path)
    ops = Ops(store, dp, _direct, lambda: LISTEN)

    def prepare(txn: Any) -> None:
        for h in (H1, H2):
            txn.put("hosts", h, {"nqn": h, "added": 1.0})  # registered hosts (a secret would be here)
        txn.put("volumes", "v", _record([H1]))

    with pytest.raises(NotFound):
        asyncio.run(ops.run("volume.grant", {"name": "v", "old_hosts": [H1, H2]}, prepare))
    assert dp.nvmet.allowed_hosts(NQN) == [H1], "h2 lost its access though the LV is gone"
    # A grant (nothing revoked) with the device gone changes nothing and fails as before.
    with pytest.raises(NotFound):
        asyncio.run(ops.run("volume.grant", {"name": "v", "old_hosts": [H1]}, lambda txn: None))
    assert dp.nvmet.allowed_hosts(NQN) == [H1]
