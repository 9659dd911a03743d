"""No data plane call can wedge the node (issue 25): a call past its deadline is named and left
behind; later calls of its lane get a fresh worker; the other lane never waits for it."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from nodeos.daemon.lanes import Lanes, lane_of
from nodeos.errors import OperationFailed


class Blocking:
    """Stands in for a data plane whose md waits on a dead leg: stop_mirror blocks until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls: list[str] = []

    def stop_mirror(self, mid: str) -> None:
        self.calls.append("stop_mirror")
        self.release.wait(30)

    def detach_remote(self, nqn: str) -> str:
        self.calls.append("detach_remote")
        return nqn

    def list_volumes(self) -> list[str]:
        self.calls.append("list_volumes")
        return ["v1"]


def test_methods_that_touch_the_fabric_have_their_own_lane() -> None:
    assert lane_of("stop_mirror") == lane_of("detach_remote") == lane_of("drop_mirror_leg") == "fabric"
    assert lane_of("list_volumes") == lane_of("apply_export") == lane_of("create_pool") == "local"


def test_a_stuck_call_is_named_and_nothing_else_waits_for_it(caplog: pytest.LogCaptureFixture) -> None:
    dp = Blocking()
    lanes = Lanes(deadline_for=lambda m: 0.5)

    async def scenario() -> None:
        started = time.monotonic()
        with pytest.raises(OperationFailed, match="stop_mirror did not return within 0 s"):
            await lanes.run(dp.stop_mirror, "m1")
        assert time.monotonic() - started < 3
        stuck = lanes.stuck()
        assert [(c.method, c.lane) for c in stuck] == [("stop_mirror", "fabric")]
        # the same lane serves the next call on a fresh worker, the other lane never waited
        assert await asyncio.wait_for(lanes.run(dp.detach_remote, "nqn.x"), 2) == "nqn.x"
        assert await asyncio.wait_for(lanes.run(dp.list_volumes), 2) == ["v1"]
        dp.release.set()
        for _ in range(50):
            if not lanes.stuck():
                break
            await asyncio.sleep(0.05)
        assert lanes.stuck() == []
        assert lanes.stuck_total == 1

    with caplog.at_level(logging.ERROR, logger="nodeosd.dataplane"):
        asyncio.run(scenario())
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "stop_mirror (lane fabric) did not return within 0 s" in logged
    assert "in stop_mirror" in logged  # the stuck thread's Python stack
    lanes.shutdown()


def test_calls_of_one_lane_keep_their_order() -> None:
    lanes = Lanes()
    seen: list[int] = []

    def slow(i: int) -> None:
        time.sleep(0.01 * (5 - i))
        seen.append(i)

    async def scenario() -> None:
        await asyncio.gather(*(lanes.run(slow, i) for i in range(5)))

    asyncio.run(scenario())
    assert seen == [0, 1, 2, 3, 4]
    lanes.shutdown()


def test_a_call_that_returns_as_its_deadline_passes_is_not_left_named_stuck() -> None:
    """The worker returns just before the deadline but its future completes only after it (the
    thread descheduled in between, as under a loaded VM): the call returned, so it is answered
    and never named stuck. Before the fix it was named stuck for ever (its `returned` note came
    before it was named), and the node reported a stuck `describe` until restarted."""
    lanes = Lanes(deadline_for=lambda m: 0.2)

    def describe() -> str:
        time.sleep(0.05)
        return "ok"

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        real = loop.call_soon_threadsafe

        def late_completion(cb, *args, **kwargs):  # type: ignore[no-untyped-def]
            if threading.current_thread() is not threading.main_thread() and cb.__name__ != "_returned":
                time.sleep(0.4)  # the executor completes the call's future well past the deadline
            return real(cb, *args, **kwargs)

        loop.call_soon_threadsafe = late_completion  # type: ignore[method-assign]
        assert await lanes.run(describe) == "ok"
        await asyncio.sleep(0.1)
        assert lanes.stuck() == []
        assert lanes.stuck_total == 0

    asyncio.run(scenario())
    lanes.shutdown()
