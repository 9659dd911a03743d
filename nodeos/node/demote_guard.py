"""A demote never waits for ever on a leg that blocks, and never lets a dropped leg acknowledge a
write (issue 9).

Replica legs block on a lost path (no fast-fail, no controller loss: nodeos/agent/legs.py). A
demoting old primary stops its md while its replicas follow the map at the same time: each one
re-exports to the new primary (retarget) or removes its export (promote), and drops this node's
controllers as it does. A leg live when the demote looked can block a moment later, and then the
steps that wait for md's I/O (the namespace's device swap, the view's table swap, md's stop with
its superblock write) wait for ever. So the demote:

1. fences its front end first: ANA inaccessible and the hosts' controllers dropped, every time
   (`DataPlane.fence_export(nqn, drop_hosts=True)`; an export already inaccessible may have been
   made so without a drop). From then on no host write reaches md (the target refuses I/O on an
   inaccessible path, and a host reconnects only to that), and no write md holds can be
   acknowledged: its controller is gone, its host retries it on another path (the new primary).
2. then guards the steps that wait for md's I/O (`LegGuard`): every GUARD_EVERY_S, off the data
   plane queue (the queue's worker may be the one waiting), it drops each leg of the record whose
   controller is not live (md fails it, its controllers go: the blocked I/O fails, md completes
   its writes on the other legs, and so does the waiting step). The first round runs before the
   steps start.

Why a dropped leg cannot lose an acknowledged write: md completes a held write on the other
legs only, but after step 1 that completion reaches no host, so the write was never
acknowledged; this node's leg is wiped right after (it comes back by a full copy). Without step
1 (say the node had lifted its fence when its lease came back, its record still primary), a
host could see a write succeed that only this node's leg holds.

Why only legs that are not live: dropping a leg makes md write its failure into the
superblocks of the legs still attached, and the freshest superblock's roles decide at the new
primary's assembly (a leg it calls faulty is kicked out). The new primary cuts this node off its
own leg (removes its replica export) only after every in-sync replica it assembles did, so the
failure of its leg lands on no leg it assembles. Dropped while live, its leg's failure would land
on those replicas and kick the new primary's own leg out of its mirror. A leg that stays live
completes its I/O, so the steps finish.

On a data plane whose mirrors keep no superblock on their members (SPDK raid1, `live_too`), a
leg's failure is written nowhere, and every leg leaves at this demote anyway: the first round
drops them all, live or not, so no later step can wait on one.

The bound: a leg's controller leaves `live` at once when its replica drops this node's
controllers, within keep-alive (5 s) when its node vanished, or at the I/O timeout for a replica
that hangs; then at most GUARD_EVERY_S plus the drop (md's fail waits at most 3 s for md's lock).
`legs_to_drop` is the rule (pure); `LegGuard` the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from nodeos.dataplane import mirror_names as names
from nodeos.errors import NodeosError

LOG = logging.getLogger("nodeosd.node")
GUARD_EVERY_S = 0.2


def leg_nqns(vol: dict[str, Any]) -> set[str]:
    """The replica NQNs of every leg a primary record's mirror may hold: its remotes and the ones
    re-placed away (`gone`) whose legs may still be in md."""
    nodes = {int(r["node"]) for r in vol.get("remotes") or []} | {int(n) for n in vol.get("gone") or []}
    return {names.replica_nqn(vol["uuid"], str(n)) for n in nodes}


def legs_to_drop(
    vol: dict[str, Any], remotes: Iterable[Any], hosts_cut: bool, live_too: bool = False
) -> list[str]:
    """Pure: the legs of the demoting record `vol` to drop now (NQNs, sorted): those attached
    (`remotes`: list_remotes()) whose controller is not live, and only once no host can be
    acknowledged through this node's front end (`hosts_cut`: fenced with the hosts' controllers
    dropped, or no front end). None before; never a live one, unless `live_too`: a mirror without
    an on-member superblock (SPDK raid1) writes nothing on the other legs when one leaves, so
    every leg goes at once and none can block a later step."""
    if not hosts_cut:
        return []
    ours = leg_nqns(vol)
    return sorted({r.nqn for r in remotes if r.nqn in ours and (live_too or r.state != "live")})


class LegGuard:
    """`async with LegGuard(dp, vol, hosts_cut):` around a demote's steps that wait for md's I/O;
    drops `legs_to_drop` off the data plane queue (threads of their own), at once and then every
    `every_s` until the block ends. `dropped`: the NQNs it dropped, in order."""

    def __init__(
        self,
        dp: Any,
        vol: dict[str, Any],
        hosts_cut: bool,
        every_s: float = GUARD_EVERY_S,
        live_too: bool = False,
    ) -> None:
        self.dp = dp
        self.vol = vol
        self.hosts_cut = hosts_cut
        self.live_too = live_too
        self.every_s = every_s
        self.dropped: list[str] = []
        self._task: asyncio.Task[None] | None = None

    async def round(self) -> list[str]:
        """One look at the legs; the NQNs dropped."""
        remotes = await asyncio.to_thread(self.dp.list_remotes)
        mid = names.mirror_id_for(self.vol["uuid"])
        out = []
        for nqn in legs_to_drop(self.vol, remotes, self.hosts_cut, self.live_too):
            state = next((r.state for r in remotes if r.nqn == nqn), "?")
            await asyncio.to_thread(self.dp.drop_mirror_leg, mid, nqn)
            LOG.warning(
                "volume %s epoch %s: demote dropped the leg %s (its controller: %s; the front end is "
                "fenced, no host can see md complete its writes)",
                self.vol["name"],
                self.vol.get("epoch"),
                nqn,
                state,
            )
            self.dropped.append(nqn)
            out.append(nqn)
        return out

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            try:
                await self.round()
            except Exception as err:  # off-queue calls raise foreign errors too; the next round retries
                why = err.message if isinstance(err, NodeosError) else f"{type(err).__name__}: {err}"
                LOG.error("volume %s: demote's leg guard: %s", self.vol["name"], why)

    async def __aenter__(self) -> LegGuard:
        await self.round()
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
