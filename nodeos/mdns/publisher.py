"""The imperative shell of mDNS advertisement: records (nodeos/mdns/plan.py) on the wire.

python-zeroconf (Debian's python3-zeroconf), one responder per interface, each bound to that
interface's address (one per IP family) so its records go out there and nowhere else: a
management interface the plan leaves out never carries a packet of ours. Every responder lives
on an event loop of its own, on a thread of its own: nothing here runs on nodeosd's loop, its
lanes or its default executor, and a call from the daemon waits a bounded time. A call that
has not returned by then keeps running on this loop; the next `apply` says so instead of
queueing behind it (one at a time, the newest wish wins when it returns).

`apply` is idempotent: it withdraws (mDNS goodbye, TTL 0) what is no longer wanted, closes
the responder of an interface that is gone or whose address changed, and registers what is
missing (probing its name first). `close` says goodbye for everything, then stops the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import threading
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from nodeos.mdns.plan import SERVICE_TYPE, Advert, bind_addresses

LOG = logging.getLogger("nodeosd.mdns")
APPLY_TIMEOUT_S = 20.0  # a register probes (~0.75 s) and announces; a whole apply, bounded
REGISTER_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 5.0  # goodbyes are 3 packets 0.125 s apart per responder
T = TypeVar("T")


class Publisher(Protocol):
    def advertised(self) -> frozenset[Advert]: ...

    async def apply(self, want: frozenset[Advert]) -> list[str]:
        """Make the advertised records `want`; the problems (empty: all done)."""
        ...

    async def close(self) -> None: ...


class ZeroconfPublisher:
    def __init__(self, apply_timeout_s: float = APPLY_TIMEOUT_S) -> None:
        self.apply_timeout_s = apply_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="nodeos-mdns", daemon=True)
        self._thread.start()
        # Touched on self._loop only.
        self._zc: dict[str, tuple[tuple[str, ...], Any]] = {}  # interface -> (bound to, AsyncZeroconf)
        self._infos: dict[Advert, Any] = {}  # Advert -> ServiceInfo registered
        self._done: frozenset[Advert] = frozenset()  # what is on the wire (read from any thread)
        self._inflight: concurrent.futures.Future[Any] | None = None

    def advertised(self) -> frozenset[Advert]:
        return self._done

    async def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        self._inflight = fut
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), timeout_s)

    async def apply(self, want: frozenset[Advert]) -> list[str]:
        if self._inflight is not None and not self._inflight.done():
            return ["the previous mDNS change has not returned yet"]
        if not self._thread.is_alive():
            return ["the mDNS thread is not running"]
        try:
            return await self._call(self._apply(want), self.apply_timeout_s)
        except TimeoutError:
            return [f"the mDNS change did not finish within {self.apply_timeout_s:g} s"]
        except Exception as exc:  # a bug in here is a failed change, reported and retried
            LOG.exception("mDNS change failed")
            return [f"the mDNS change failed: {_why(exc)}"]

    async def close(self) -> None:
        """Goodbyes for everything advertised, responders closed, the loop stopped (bounded)."""
        if self._thread.is_alive():
            if self._inflight is not None and not self._inflight.done():
                self._inflight.cancel()
            try:
                await self._call(self._close(), CLOSE_TIMEOUT_S)
            except Exception as exc:  # bounded: a stop goes on without the goodbyes
                LOG.warning("mDNS withdrawal at stop did not finish: %r", exc)
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join, 2.0)
        if not self._thread.is_alive():
            self._loop.close()

    # --- on the publisher's loop ------------------------------------------------------

    async def _apply(self, want: frozenset[Advert]) -> list[str]:
        problems: list[str] = []
        binds = bind_addresses(want)
        # An interface whose responder must bind elsewhere: its old socket may be bound to an
        # address that is gone (it cannot send), so the new responder says the goodbyes again.
        rebound = {i for i, (bound, _zc) in self._zc.items() if binds.get(i) not in (None, bound)}
        gone = {adv: self._infos[adv] for adv in self._infos if adv not in want or adv.interface in rebound}
        for adv in sorted(set(self._infos) - want):
            await self._withdraw(adv, problems)
        for ifname in sorted(self._zc):
            if binds.get(ifname) != self._zc[ifname][0]:
                await self._close_interface(ifname, problems)
        for adv, info in sorted(gone.items()):
            if adv.interface in rebound:
                await self._goodbye_again(adv, info, binds[adv.interface], problems)
        # Together: each probes its name for ~0.75 s and announces for ~1 s more.
        missing = sorted(want - set(self._infos))
        await asyncio.gather(*(self._register(adv, binds, problems) for adv in missing))
        self._done = frozenset(self._infos)
        return problems

    async def _register(self, adv: Advert, binds: dict[str, tuple[str, ...]], problems: list[str]) -> None:
        try:
            zc = await self._responder(adv.interface, binds[adv.interface])
            info = _service_info(adv)
            # A name another responder holds (a node of the same name in another cluster on this
            # network) is renamed ("-2"), not refused: hosts still find this one.
            task = await asyncio.wait_for(
                zc.async_register_service(info, allow_name_change=True), REGISTER_TIMEOUT_S
            )
            self._infos[adv] = info
            self._done = frozenset(self._infos)
            await asyncio.wait_for(task, REGISTER_TIMEOUT_S)
            LOG.info("mDNS: advertising %s on %s (%s)", info.name, adv.interface, ", ".join(adv.addresses))
        except Exception as exc:
            problems.append(f"{adv.instance} on {adv.interface}: {_why(exc)}")

    async def _responder(self, ifname: str, bind: tuple[str, ...]) -> Any:
        have = self._zc.get(ifname)
        if have is not None:
            return have[1]
        from zeroconf.asyncio import AsyncZeroconf

        zc = AsyncZeroconf(interfaces=list(bind))
        try:
            _bind_to_device(zc, ifname)  # before its loop reads the sockets: nothing heard elsewhere
        except Exception:
            await asyncio.wait_for(zc.async_close(), CLOSE_TIMEOUT_S)
            raise
        # A register of another protocol on this interface may have made one meanwhile.
        have = self._zc.setdefault(ifname, (bind, zc))
        if have[1] is not zc:
            await asyncio.wait_for(zc.async_close(), CLOSE_TIMEOUT_S)
        return have[1]

    async def _withdraw(self, adv: Advert, problems: list[str]) -> None:
        info = self._infos.pop(adv)
        self._done = frozenset(self._infos)
        have = self._zc.get(adv.interface)
        if have is None:
            return
        try:
            task = await asyncio.wait_for(have[1].async_unregister_service(info), REGISTER_TIMEOUT_S)
            await asyncio.wait_for(task, REGISTER_TIMEOUT_S)
            LOG.info("mDNS: withdrew %s on %s (goodbye sent)", adv.name, adv.interface)
        except Exception as exc:
            problems.append(f"withdrawing {adv.instance} on {adv.interface}: {_why(exc)}")

    async def _goodbye_again(
        self, adv: Advert, info: Any, bind: tuple[str, ...], problems: list[str]
    ) -> None:
        try:
            zc = await self._responder(adv.interface, bind)
            await asyncio.wait_for(zc.zeroconf.async_wait_for_start(), REGISTER_TIMEOUT_S)
            task = await asyncio.wait_for(zc.async_unregister_service(info), REGISTER_TIMEOUT_S)
            await asyncio.wait_for(task, REGISTER_TIMEOUT_S)
        except Exception as exc:
            problems.append(f"withdrawing {adv.instance} on {adv.interface} again: {_why(exc)}")

    async def _close_interface(self, ifname: str, problems: list[str]) -> None:
        for adv in sorted(a for a in self._infos if a.interface == ifname):
            await self._withdraw(adv, problems)
        _bind, zc = self._zc.pop(ifname)
        try:
            await asyncio.wait_for(zc.async_close(), CLOSE_TIMEOUT_S)
        except Exception as exc:
            problems.append(f"closing the mDNS responder on {ifname}: {_why(exc)}")

    async def _close(self) -> None:
        problems: list[str] = []
        # Goodbyes for every interface together: each takes ~0.25 s of its own.
        await asyncio.gather(*(self._close_interface(i, problems) for i in sorted(self._zc)))
        self._done = frozenset(self._infos)
        for p in problems:
            LOG.warning("mDNS at stop: %s", p)


def _bind_to_device(zc: Any, ifname: str) -> None:
    """The responder's sockets hear and speak on `ifname` alone (SO_BINDTODEVICE; root).

    Its wildcard socket (*:5353) otherwise hears mDNS from every interface where any socket of
    the host joined the group: with avahi-daemon or systemd-resolved listening on the
    management interface, a storage responder answered a browser there, its unicast reply
    going out through the management network (tests/netns/test_mdns.py). IP_MULTICAST_ALL off
    was not enough: queries from port 5353, as every mDNS browser sends them, still came in.
    python-zeroconf does not expose its sockets: they are its engine's (private) attributes,
    there in 0.147 (Debian 13) and later; without them the responder is not used."""
    engine = getattr(getattr(zc, "zeroconf", None), "engine", None)
    listen = getattr(engine, "_listen_socket", None)
    respond = list(getattr(engine, "_respond_sockets", None) or [])
    if listen is None or not respond:
        raise RuntimeError("cannot reach the responder's sockets to bind them to the interface")
    for sock in {id(s): s for s in [listen, *respond]}.values():
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())


def _service_info(adv: Advert) -> Any:
    from zeroconf import ServiceInfo

    return ServiceInfo(
        SERVICE_TYPE,
        adv.name,
        port=adv.port,
        properties=adv.txt(),
        server=adv.host,
        parsed_addresses=list(adv.addresses),
    )


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
