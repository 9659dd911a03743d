"""Read barriers share ReadIndex rounds (nodeos/cluster/waiters.py ReadRounds): what a leader
with many members renewing leases needs, without serving a read from a round asked for before
that read began."""

from __future__ import annotations

import asyncio

import pytest

from nodeos.cluster.errors import NotLeader
from nodeos.cluster.waiters import ReadRounds, Waiters


def test_readers_arriving_during_a_round_share_the_next_one_not_the_running_one() -> None:
    async def main() -> None:
        w = Waiters()
        asked: list[bytes] = []
        rr = ReadRounds(w, asked.append)
        first = [asyncio.ensure_future(rr.barrier(5)) for _ in range(50)]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(asked) == 1  # fifty readers, one round
        late = [asyncio.ensure_future(rr.barrier(5)) for _ in range(50)]
        await asyncio.sleep(0)
        # The leader confirms the first round: only the readers that began before it are served.
        w.read_confirmed(asked[0], 7)
        w.serve_reads(7)
        await asyncio.gather(*first)
        await asyncio.sleep(0)
        assert not any(f.done() for f in late) and len(asked) == 2
        w.read_confirmed(asked[1], 9)
        w.serve_reads(9)
        await asyncio.gather(*late)
        assert rr.rounds == 2

    asyncio.run(main())


def test_a_round_refused_or_lost_fails_its_readers_with_not_leader() -> None:
    async def main() -> None:
        w = Waiters()

        def refuse(ctx: bytes) -> None:
            from nodeos.cluster.raft import ProposalDropped

            raise ProposalDropped("not leader")

        with pytest.raises(NotLeader):
            await ReadRounds(w, refuse).barrier(5)
        asked: list[bytes] = []
        rr = ReadRounds(w, asked.append)
        reader = asyncio.ensure_future(rr.barrier(5))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        w.fail_all(RuntimeError("leadership changed"))  # what the driver does when it steps down
        with pytest.raises(NotLeader):
            await reader
        with pytest.raises(NotLeader, match=r"within 0\.05 s"):
            await rr.barrier(0.05)  # nothing confirms it

    asyncio.run(main())


def test_a_slow_round_does_not_hold_later_readers_past_the_spacing() -> None:
    """A round still out after `spacing_s` (a loaded follower, a lost heartbeat) gets a second one
    beside it for the readers that came since: they are served by theirs, not failed behind it."""

    async def main() -> None:
        w = Waiters()
        asked: list[bytes] = []
        rr = ReadRounds(w, asked.append, spacing_s=0.05)
        stuck = asyncio.ensure_future(rr.barrier(5))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(asked) == 1 and rr.inflight == 1
        late = asyncio.ensure_future(rr.barrier(5))
        await asyncio.sleep(0.01)
        assert len(asked) == 1  # within the spacing: it waits to share the next round
        await asyncio.sleep(0.1)
        assert len(asked) == 2 and rr.inflight == 2  # the first is still out: a second beside it
        w.read_confirmed(asked[1], 4)
        w.serve_reads(4)
        await asyncio.wait_for(late, 1)
        assert not stuck.done()
        w.read_confirmed(asked[0], 4)
        w.serve_reads(4)
        await asyncio.wait_for(stuck, 1)
        assert rr.inflight == 0 and rr.rounds == 2

    asyncio.run(main())
