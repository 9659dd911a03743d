"""A new secondary's first export of its leg (nodeos/node/mirror_ops.py `replica_export`): the
leg's md superblock is wiped before the export, so an LV left from an earlier replica of the same
volume on this node (create_volume takes it as it is) joins the primary's mirror by a full copy,
never by md's bitmap re-add (the soak of 2026-11-30: a mark read back as zeros). A rerun after a
crash, with the export already there, leaves the leg alone: it may be a mirror member by then."""

from __future__ import annotations

import asyncio
from typing import Any

from nodeos.dataplane import mirror_names as names
from nodeos.dataplane.base import MirrorCaps
from nodeos.node.mirror_ops import MirrorOps
from tests.unit.agent.test_failover_plan import ready
from tests.unit.agent.test_grow_plan import GrowOps, grown_map
from tests.unit.node.test_replicas import LST, UUID

MiB = 1 << 20
CAPS = MirrorCaps(8 * MiB, views=True, write_freeze=True, superblock=True, grow=True)


class ExportOps(GrowOps):
    def __init__(self, exported: bool) -> None:
        super().__init__([], CAPS)
        self.exported = exported

    def listeners(self) -> Any:
        return LST

    async def call(self, method: str, *args: Any) -> Any:
        out = await super().call(method, *args)
        if method == "export_info":
            return object() if self.exported else None
        if method == "ensure_view":
            return "/dev/mapper/front"
        return out


def _export(exported: bool) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    rec = dict(ready(grown_map(), 1)["v"], state="exporting", lv_device="/dev/p/v_leg")
    ops = ExportOps(exported)
    mirrors = MirrorOps(ops)
    done: dict[str, Any] = {}
    mirrors._load = lambda name: dict(rec)  # type: ignore[method-assign]
    mirrors._finish = lambda d, vol: done.update(vol)  # type: ignore[method-assign]
    asyncio.run(mirrors.replica_export({"name": "v", "me": 1}))
    return [m for m, _ in ops.calls], dict(ops.calls), done


def test_a_new_leg_loses_any_old_superblock_before_it_is_exported() -> None:
    methods, args, done = _export(exported=False)
    assert methods[:3] == ["export_info", "wipe_mirror_member", "apply_export"], methods
    assert args["export_info"] == (names.replica_nqn(UUID, "1"),)
    assert args["wipe_mirror_member"] == ("/dev/p/v_leg",)
    assert done["device"] == "/dev/mapper/front"


def test_a_rerun_with_the_export_already_there_leaves_the_leg_alone() -> None:
    methods, _, done = _export(exported=True)
    assert "wipe_mirror_member" not in methods and "apply_export" in methods, methods
    assert done["device"] == "/dev/mapper/front"
