"""The API socket's bounds, on a real unix socket: idle clients are closed, and clients holding
partial frames cannot make the daemon buffer more than its cap."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import msgpack

from nodeos.daemon.api import ApiServer
from nodeos.rpc import framing


async def read_reply(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    try:
        (n,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), 10))
        return msgpack.unpackb(await asyncio.wait_for(reader.readexactly(n), 10))
    except asyncio.IncompleteReadError:
        return None


def test_an_idle_client_is_disconnected(tmp_path: Path) -> None:
    async def main() -> None:
        api = ApiServer(tmp_path / "api.sock", idle_timeout_s=0.3)
        await api.start()
        try:
            reader, writer = await asyncio.open_unix_connection(str(api.path))
            # Sends nothing: the server hangs up (EOF), it does not wait for ever.
            assert await asyncio.wait_for(reader.read(), 10) == b""
            assert api.idle_closed == 1
            writer.close()
        finally:
            await api.stop()

    asyncio.run(main())


def test_partial_frames_cannot_pass_the_buffer_cap(tmp_path: Path) -> None:
    async def main() -> None:
        api = ApiServer(tmp_path / "api.sock", max_buffered=3 << 20, frame_timeout_s=30)

        async def echo(params: dict[str, Any]) -> Any:
            return {"n": len(params.get("blob", b""))}

        api.add_routes("test", {"test.echo": echo})
        await api.start()
        try:
            body = framing.pack(framing.request(1, "test.echo", {"blob": b"x" * (2 << 20)}))[4:]
            r1, w1 = await asyncio.open_unix_connection(str(api.path))
            w1.write(struct.pack(">I", len(body)) + body[: len(body) // 2])  # holds half a frame
            await w1.drain()
            while api.buffered == 0:  # the server has reserved the first client's frame
                await asyncio.sleep(0.01)
            r2, w2 = await asyncio.open_unix_connection(str(api.path))
            w2.write(struct.pack(">I", len(body)))  # a second 2 MiB frame would pass 3 MiB
            await w2.drain()
            reply = await read_reply(r2)
            assert reply is not None and reply["error"]["code"] == "busy", reply
            assert api.buffered <= 3 << 20
            w1.write(body[len(body) // 2 :])  # the first client finishes and is served
            await w1.drain()
            reply = await read_reply(r1)
            assert reply is not None and reply["result"] == {"n": 2 << 20}, reply
            assert api.buffered == 0  # given back
            for w in (w1, w2):
                w.close()
        finally:
            await api.stop()

    asyncio.run(main())


def test_a_frame_that_never_completes_is_dropped_and_its_bytes_given_back(tmp_path: Path) -> None:
    async def main() -> None:
        api = ApiServer(tmp_path / "api.sock", frame_timeout_s=0.3)
        await api.start()
        try:
            r, w = await asyncio.open_unix_connection(str(api.path))
            w.write(struct.pack(">I", 1 << 20) + b"x" * 1000)
            await w.drain()
            reply = await read_reply(r)
            assert reply is not None and reply["error"]["code"] == "timeout", reply
            assert api.buffered == 0
            w.close()
        finally:
            await api.stop()

    asyncio.run(main())
