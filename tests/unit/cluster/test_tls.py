"""Mutual TLS between peers on real loopback sockets: traffic is encrypted on the wire, and a
certificate from another CA, or for another node id, is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nodeos.cluster import tlsca
from nodeos.cluster.transport import PeerTransport
from nodeos.errors import NodeosError

SECRET = b"s" * 32
CLUSTER = "c-tls"

pytestmark = pytest.mark.timeout(60)


def identity(tmp: Path, raft_id: int, ca: tuple[bytes, bytes], cert_for: int | None = None) -> tlsca.TlsFiles:
    files = tlsca.TlsFiles(tmp / f"n{raft_id}-{cert_for}")
    key, csr = tlsca.make_request(raft_id, CLUSTER)
    files.write("ca.pem", ca[1])
    files.write("node.key", key)
    files.write("node.pem", tlsca.sign_request(ca[0], ca[1], csr, cert_for or raft_id))
    return files


async def echo(frm: int, method: str, params: dict[str, Any]) -> Any:
    return {"from": frm, "params": params}


def node(raft_id: int, files: tlsca.TlsFiles) -> PeerTransport:
    return PeerTransport(
        raft_id,
        CLUSTER,
        SECRET,
        lambda f, m: None,
        echo,
        tls_server=files.server_context(),
        tls_client=files.client_context(),
    )


async def relay(target: str, seen: bytearray) -> tuple[asyncio.Server, str]:
    """A TCP relay that records every byte the dialer sends: what an eavesdropper sees."""
    host, port = target.rsplit(":", 1)

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection(host, int(port))

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, record: bool) -> None:
            while data := await src.read(65536):
                if record:
                    seen.extend(data)
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(pump(r, uw, True), pump(ur, w, False), return_exceptions=True)

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    return srv, f"127.0.0.1:{srv.sockets[0].getsockname()[1]}"


def test_peer_traffic_is_encrypted_and_authenticated_both_ways(tmp_path: Path) -> None:
    ca = tlsca.make_ca(CLUSTER)

    async def main() -> None:
        a, b = node(1, identity(tmp_path, 1, ca)), node(2, identity(tmp_path, 2, ca))
        await b.listen("127.0.0.1", 0)
        seen = bytearray()
        srv, via = await relay(b.advertise, seen)
        marker = "a-plaintext-marker-0123456789"
        assert await a.request_address(via, "echo", {"m": marker}, timeout=10) == {
            "from": 1,
            "params": {"m": marker},
        }
        assert seen and marker.encode() not in seen  # the relay saw only ciphertext
        srv.close()
        await a.close()
        await b.close()

    asyncio.run(main())


@pytest.mark.parametrize("who", ["other_ca", "wrong_node"])
def test_a_certificate_of_another_cluster_or_node_is_refused(tmp_path: Path, who: str) -> None:
    ca = tlsca.make_ca(CLUSTER)

    async def main() -> None:
        b = node(2, identity(tmp_path, 2, ca))
        await b.listen("127.0.0.1", 0)
        if who == "other_ca":
            bad = identity(tmp_path, 1, tlsca.make_ca(CLUSTER))  # same secret, foreign CA
        else:
            bad = identity(tmp_path, 1, ca, cert_for=3)  # our CA, but the cert names node 3
        a = node(1, bad)
        with pytest.raises(NodeosError):
            await a.request_address(b.advertise, "echo", {}, timeout=5)
        await a.close()
        await b.close()

    asyncio.run(main())
