"""Processes for tests/netns/test_mdns.py, each run inside a network namespace:

    python -m tests.netns.mdns_helper browse ADDR      a real mDNS browser (python-zeroconf's
        ServiceBrowser) bound to ADDR: one JSON line per service added, updated or removed
    python -m tests.netns.mdns_helper serve CONFIG     nodeosd's mDNS service (nodeos/mdns/service.py)
        with its real publisher, the node's facts from CONFIG (JSON); stdin commands `drain`,
        `undrain`, `stop`; a JSON status line after each

`serve` can also hold a socket on *:5353 joined to the mDNS group on another interface, as
avahi-daemon or systemd-resolved would on the management network.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import socket
import sys
import time
from types import SimpleNamespace
from typing import Any

TYPE = "_nvme-disc._tcp.local."


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def browse(addr: str) -> None:
    from zeroconf import ServiceBrowser, ServiceListener, Zeroconf

    seen: queue.Queue[tuple[str, str]] = queue.Queue()

    class Listener(ServiceListener):
        def add_service(self, zc: Zeroconf, type_: str, name: str) -> None:
            seen.put(("add", name))

        def update_service(self, zc: Zeroconf, type_: str, name: str) -> None:
            seen.put(("update", name))

        def remove_service(self, zc: Zeroconf, type_: str, name: str) -> None:
            seen.put(("remove", name))

    zc = Zeroconf(interfaces=[addr])
    ServiceBrowser(zc, TYPE, Listener())
    emit({"event": "browsing", "on": addr})
    try:
        while True:
            event, name = seen.get()
            out: dict[str, Any] = {"event": event, "name": name, "t": time.monotonic()}
            if event != "remove":
                info = zc.get_service_info(TYPE, name, 3000)
                if info is not None:
                    out |= {
                        "addresses": sorted(info.parsed_addresses()),
                        "port": info.port,
                        "txt": {k.decode(): (v or b"").decode() for k, v in info.properties.items()},
                        "server": info.server,
                    }
            emit(out)
    finally:
        zc.close()


class Node:
    def __init__(self, listeners: list[list[str]]) -> None:
        self.listeners = listeners
        self.agent = None

    def listeners_json(self) -> list[dict[str, str]]:
        return [{"trtype": t, "traddr": a, "trsvcid": "4420", "adrfam": "ipv4"} for t, a in self.listeners]

    def records(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        return {}, {"v1": {"name": "v1"}}, {}

    def dataplane_down(self) -> str | None:
        return None


def group_listener(addr: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("", 5353))
    group = socket.inet_aton("224.0.0.251") + socket.inet_aton(addr)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, group)
    return s


async def serve(cfg: dict[str, Any]) -> None:
    from nodeos.mdns import service as mod

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    mod.ADDR_POLL_S = 1.0  # follow address changes within a second here (5 s in nodeosd)
    held = [group_listener(a) for a in cfg.get("group_listeners", [])]
    nodes = {1: {"state": "active"}}
    driver = SimpleNamespace(id=1, map=SimpleNamespace(state={"nodes": nodes}))
    ctx = SimpleNamespace(
        node_name=cfg["node_name"],
        node_id="0a1b2c3d4e5f60718293a4b5c6d7e8f9",
        dataplane=SimpleNamespace(name="kernel", discovery_svcid="8009"),
        config=cfg.get("config", {}),
        services={"node": Node(cfg["listeners"]), "cluster": SimpleNamespace(driver=driver)},
    )
    svc = mod.MdnsService(ctx)
    await svc.start()
    emit({"event": "started"})
    loop = asyncio.get_running_loop()
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if line in ("drain", "undrain"):
            nodes[1]["state"] = "draining" if line == "drain" else "active"
        if not line or line == "stop":
            started = time.monotonic()
            await svc.stop()
            emit({"event": "stopped", "took_s": round(time.monotonic() - started, 2)})
            break
        emit({"event": line, "status": svc.status()})
    for s in held:
        s.close()


def main() -> None:
    if sys.argv[1] == "browse":
        browse(sys.argv[2])
    else:
        asyncio.run(serve(json.loads(sys.argv[2])))


if __name__ == "__main__":
    main()
