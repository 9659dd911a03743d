"""A replicated volume's delete on its primary never waits on a leg (issue 9, found in CI's lab).

Replica legs block on a lost path (no fast-fail, no controller loss). While a volume is deleted
its secondaries remove their replica exports at the same time, so a leg that is live when the
primary's teardown starts can block a moment later and hold md's stop for ever. The teardown
cuts every attached leg first, live or not, in one round (each leg's loss bounded first, none
waiting behind another: issue 25), before anything that waits for md's I/O. The data
plane here records the calls in order: the kernel target and md cannot run on this host (the
lab runs the real ones).
"""

from __future__ import annotations

import asyncio
from typing import Any

from nodeos.dataplane import mirror_names as names
from nodeos.dataplane.base import RemoteInfo
from nodeos.node.mirror_ops import MirrorOps

UUID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"


class RecordingOps:
    """The node's `ops.call` edge, recording data plane calls; list_remotes answers `remotes`."""

    def __init__(self, remotes: list[RemoteInfo]) -> None:
        self.remotes = remotes
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    async def call(self, method: str, *args: Any) -> Any:
        self.calls.append((method, args))
        if method == "cut_mirror_legs":
            return list(args[1])
        return self.remotes if method == "list_remotes" else None


def _primary(nodes: list[int]) -> dict[str, Any]:
    return {
        "uuid": UUID,
        "name": "v",
        "role": "primary",
        "epoch": 2,
        "host_nqn": "nqn.2014-08.io.nodeos:node:" + "c" * 32 + ":1",
        "remotes": [
            {"node": n, "trtype": "tcp", "traddr": f"198.18.0.{n}", "trsvcid": "4420"} for n in nodes
        ],
    }


def test_delete_on_the_primary_drops_every_attached_leg_live_or_not_before_stopping_md() -> None:
    live = RemoteInfo(names.replica_nqn(UUID, "2"), None, "live", "/dev/nvme1n1", None)
    blocked = RemoteInfo(names.replica_nqn(UUID, "3"), None, "connecting", "/dev/nvme2n1", None)
    ops = RecordingOps([live, blocked])
    asyncio.run(MirrorOps(ops).teardown(_primary([2, 3, 4])))  # node 4's leg is not attached
    order = [m for m, _ in ops.calls]
    # one round for every attached leg (issue 25): no leg's cut waits behind another's
    cuts = [args[1] for m, args in ops.calls if m == "cut_mirror_legs"]
    assert len(cuts) == 1 and sorted(cuts[0]) == sorted([live.nqn, blocked.nqn])
    assert "drop_mirror_leg" not in order
    assert order.index("cut_mirror_legs") < order.index("stop_mirror")
    assert order.index("stop_mirror") > order.index("remove_view")
