"""A join token whose key was altered (issue 25, probe 7): the member it names proves the real
key, the joiner holds another one. That is the operator's bad token (exit 2, field token), not
a peer failing to prove the cluster secret (exit 1)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodeos.cluster.transport import PeerTransport
from nodeos.errors import BadInput, OperationFailed

CLUSTER = "c-test"
TOKEN_ID = b"t" * 16
TOKEN_KEY = b"k" * 32

pytestmark = pytest.mark.timeout(60)


async def _member() -> tuple[PeerTransport, str]:
    async def on_request(frm: int, method: str, params: dict[str, Any]) -> Any:
        return {"joined": True}

    m = PeerTransport(
        1,
        CLUSTER,
        b"s" * 32,
        lambda frm, msg: None,
        on_request,
        token_key=lambda tid: TOKEN_KEY if tid == TOKEN_ID else None,
    )
    host, port = await m.listen("127.0.0.1", 0)
    return m, f"{host}:{port}"


async def _join(address: str, key: bytes) -> Any:
    j = PeerTransport(7, CLUSTER, key, lambda frm, msg: None, _never, join_id=TOKEN_ID)
    try:
        return await j.request_address(address, "cluster.join", {}, timeout=5)
    finally:
        await j.close()


async def _never(frm: int, method: str, params: dict[str, Any]) -> Any:
    raise AssertionError("the joiner serves nothing")


def test_an_altered_token_key_is_the_operators_bad_token() -> None:
    async def main() -> None:
        m, address = await _member()
        try:
            with pytest.raises(BadInput) as e:
                await _join(address, bytes([TOKEN_KEY[0] ^ 1]) + TOKEN_KEY[1:])
            assert e.value.field == "token" and e.value.exit_code == 2
            assert e.value.message == "the token is not valid for this cluster"
            assert await _join(address, TOKEN_KEY) == {"joined": True}  # the real key still joins
        finally:
            await m.close()

    asyncio.run(main())


def test_a_member_that_cannot_prove_the_secret_is_still_the_peers_fault() -> None:
    async def main() -> None:
        m, address = await _member()
        other = PeerTransport(2, CLUSTER, b"x" * 32, lambda frm, msg: None, _never)
        try:
            with pytest.raises(OperationFailed, match="did not prove the cluster secret"):
                await other.request_address(address, "echo", {}, timeout=5)
        finally:
            await other.close()
            await m.close()

    asyncio.run(main())
