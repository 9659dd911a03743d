"""nodeosd's mDNS service around the pure plan: facts from the node, failures retried with a
pause and said once, a hung publisher that never holds anything up."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from nodeos.daemon import config as configmod
from nodeos.errors import BadInput
from nodeos.mdns import service as mod
from nodeos.mdns.plan import Advert
from nodeos.mdns.publisher import ZeroconfPublisher


class FakePublisher:
    def __init__(self, answers: list[list[str]]) -> None:
        self.answers = answers
        self.calls: list[frozenset[Advert]] = []
        self.done: frozenset[Advert] = frozenset()

    def advertised(self) -> frozenset[Advert]:
        return self.done

    async def apply(self, want: frozenset[Advert]) -> list[str]:
        self.calls.append(want)
        problems = self.answers.pop(0) if self.answers else []
        if not problems:
            self.done = want
        return problems

    async def close(self) -> None:
        self.done = frozenset()


class Node:
    agent = None

    def listeners_json(self) -> list[dict[str, str]]:
        return [{"trtype": "tcp", "traddr": "10.7.0.1"}, {"trtype": "tcp", "traddr": "10.8.0.1"}]

    def records(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        return {}, {"v1": {}}, {}

    def dataplane_down(self) -> str | None:
        return None


class Observe:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def record(self, ev: dict[str, Any]) -> dict[str, Any]:
        self.events.append(ev)
        return ev


def make(answers: list[list[str]], **config: Any) -> tuple[mod.MdnsService, FakePublisher, Any]:
    nodes = {1: {"state": "active"}}
    driver = SimpleNamespace(id=1, map=SimpleNamespace(state={"nodes": nodes}))
    ctx = SimpleNamespace(
        node_name="sn1",
        dataplane=SimpleNamespace(discovery_svcid="8009"),
        config={"peer_listen": "10.8.0.1:7100", **config},
        services={"node": Node(), "cluster": SimpleNamespace(driver=driver), "observe": Observe()},
    )
    pub = FakePublisher(answers)
    ifaces = (("stor0", "10.7.0.1"), ("mgmt0", "10.8.0.1"))
    svc = mod.MdnsService(ctx, publisher=lambda: pub, interfaces=lambda: ifaces)
    return svc, pub, ctx


def test_records_follow_the_node_drain_and_undrain() -> None:
    async def run() -> None:
        svc, pub, ctx = make([])
        await svc.start()
        try:
            await svc.reconcile()
            assert {(a.interface, a.protocol) for a in pub.done} == {("stor0", "tcp")}  # mgmt0: peer address
            ctx.services["cluster"].driver.map.state["nodes"][1]["state"] = "draining"
            await svc.reconcile()
            assert pub.done == frozenset() and "the node is draining" in svc.status()["notes"]
            ctx.services["cluster"].driver.map.state["nodes"][1]["state"] = "active"
            await svc.reconcile()
            assert len(pub.done) == 1
            calls = len(pub.calls)
            await svc.reconcile()
            assert len(pub.calls) == calls  # nothing changed: the publisher is not asked again
        finally:
            await svc.stop()
        assert pub.done == frozenset()  # stop withdraws everything

    asyncio.run(run())


def test_a_failure_is_retried_after_a_growing_pause_and_said_once() -> None:
    async def run() -> None:
        svc, pub, ctx = make([["stor0: bind failed"], ["stor0: bind failed"]])
        await svc.start()
        try:
            await svc.reconcile()
            assert svc.problems == ["stor0: bind failed"] and svc.failures == 1
            await svc.reconcile()
            assert len(pub.calls) == 1  # the retry waits for its pause
            first_pause = svc._pause
            svc._retry_at = 0.0
            await svc.reconcile()
            assert len(pub.calls) == 2 and svc.failures == 2 and svc._pause == 2 * first_pause
            svc._retry_at = 0.0
            await svc.reconcile()
            assert svc.problems == [] and len(pub.done) == 1 and svc._pause == mod.RETRY_MIN_S
        finally:
            await svc.stop()
        kinds = [e["kind"] for e in ctx.services["observe"].events]
        assert kinds == ["mdns_failed", "mdns_recovered"]
        assert "bind failed" in ctx.services["observe"].events[0]["message"]

    asyncio.run(run())


def test_off_starts_nothing() -> None:
    async def run() -> None:
        svc, _pub, _ctx = make([], mdns=False)
        await svc.start()
        assert svc.publisher is None and svc._task is None
        assert svc.status()["enabled"] is False and svc.status()["advertised"] == []
        await svc.stop()

    asyncio.run(run())


def test_a_hung_publisher_answers_within_its_bound_and_is_not_queued_behind() -> None:
    async def run() -> None:
        pub = ZeroconfPublisher(apply_timeout_s=0.2)

        async def hang(want: frozenset[Advert]) -> list[str]:
            await asyncio.sleep(3600)
            return []

        pub._apply = hang  # type: ignore[method-assign]
        t = time.monotonic()
        assert "did not finish within 0.2 s" in (await pub.apply(frozenset()))[0]
        assert "has not returned yet" in (await pub.apply(frozenset()))[0]
        assert time.monotonic() - t < 2
        t = time.monotonic()
        await pub.close()
        assert time.monotonic() - t < 8

    asyncio.run(run())


def test_management_addresses_and_config_keys() -> None:
    cfg = {"peer_listen": "0.0.0.0:7100", "rest_listen": "192.0.2.5:8443", "metrics_listen": "off"}
    assert mod.management_addresses(cfg) == {"192.0.2.5"}  # a wildcard names no interface
    for key in ("mdns", "mdns_management"):
        with pytest.raises(BadInput) as exc:
            configmod.check(configmod.Config(**{key: "yes"}))
        assert exc.value.field == key
    assert configmod.Config().mdns is True and configmod.Config().mdns_management is False


def test_a_publisher_that_raises_is_a_failed_change_not_a_crash() -> None:
    async def run() -> None:
        pub = ZeroconfPublisher(apply_timeout_s=2)

        async def boom(want: frozenset[Advert]) -> list[str]:
            raise RuntimeError("bug")

        pub._apply = boom  # type: ignore[method-assign]
        assert await pub.apply(frozenset()) == ["the mDNS change failed: RuntimeError: bug"]
        await pub.close()

    asyncio.run(run())


def test_a_kernel_node_whose_every_volume_requires_tls_advertises_nothing() -> None:
    """The kernel target keeps no plain discovery port for a TLS-only volume (nvmet would take
    plain-text I/O there), so there is no controller to advertise; SPDK keeps one beside every
    export."""
    h = "nqn.2014-08.com.example:h1"

    async def run() -> None:
        svc, pub, ctx = make([])
        ctx.services["node"].records = lambda: ({}, {"v1": {"hosts": [h]}}, {})
        ctx.services["cluster"].driver.map.state["hosts"] = {h: {"nqn": h, "tls": "required", "tls_key": "s"}}
        ctx.dataplane = SimpleNamespace(discovery_svcid="8009", name="kernel")
        await svc.start()
        try:
            await svc.reconcile()
            assert pub.done == frozenset()
            ctx.services["cluster"].driver.map.state["hosts"][h]["tls"] = "allowed"  # plain text too
            await svc.reconcile()
            assert len(pub.done) == 1
            ctx.services["cluster"].driver.map.state["hosts"][h]["tls"] = "required"
            ctx.dataplane = SimpleNamespace(discovery_svcid="8009", name="spdk")
            await svc.reconcile()
            assert len(pub.done) == 1
        finally:
            await svc.stop()

    asyncio.run(run())


def test_a_kernel_node_exporting_nothing_advertises_while_its_discovery_port_refers_hosts_on() -> None:
    """Its discovery port is anchored then (nodeos/dataplane/kernel/nvmet.py, ANCHOR_NQN): it
    answers, with referrals to the nodes that export. Alone in its cluster it keeps no port."""

    async def run() -> None:
        svc, pub, ctx = make([])
        refers = {"now": True}
        ctx.services["node"].records = lambda: ({}, {}, {})
        ctx.services["node"].agent = SimpleNamespace(refers_hosts=lambda: refers["now"], published=None)
        ctx.dataplane = SimpleNamespace(discovery_svcid="8009", name="kernel")
        await svc.start()
        try:
            await svc.reconcile()
            assert len(pub.done) == 1
            refers["now"] = False
            await svc.reconcile()
            assert pub.done == frozenset()
        finally:
            await svc.stop()

    asyncio.run(run())
