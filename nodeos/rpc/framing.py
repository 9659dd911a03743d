"""One framing for CLI<->daemon and daemon<->daemon traffic.

A frame is a 4-byte big-endian length followed by that many bytes of msgpack, which
must decode to a map. Requests are `{v, id, method, params}`; replies are
`{id, result}` or `{id, error: {code, message, field?, allowed?}}`.
A frame over the size limit, a wrong version or a bad type raises FrameError: the
caller answers with an error (when it can) and never crashes.
"""

from __future__ import annotations

import struct

import msgpack

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the blocking CLI client pays for every import
if TYPE_CHECKING:
    import asyncio
    from typing import Any

PROTOCOL_VERSION = 1
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
_LEN = struct.Struct(">I")


class FrameError(Exception):
    """A frame that cannot be accepted; `code` is sent back to the peer."""

    def __init__(self, message: str, code: str = "bad_frame") -> None:
        super().__init__(message)
        self.code = code


def pack(obj: dict[str, Any]) -> bytes:
    """Encode one message as a complete frame."""
    body = msgpack.packb(obj, use_bin_type=True)
    return _LEN.pack(len(body)) + body


def unpack_body(body: bytes) -> dict[str, Any]:
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise FrameError(f"frame is not valid msgpack: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError(f"frame must be a msgpack map, got {type(obj).__name__}")
    return obj


async def read_frame(
    reader: asyncio.StreamReader, max_frame: int = DEFAULT_MAX_FRAME
) -> dict[str, Any] | None:
    """Read one frame; None on a clean end of stream before a header."""
    import asyncio  # only the daemon reads frames asynchronously; imported once, then a lookup

    try:
        header = await reader.readexactly(_LEN.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise FrameError("connection closed inside a frame header") from None
    (length,) = _LEN.unpack(header)
    if length > max_frame:
        raise FrameError(f"frame of {length} bytes exceeds the limit of {max_frame}", code="too_large")
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise FrameError("connection closed inside a frame body") from None
    return unpack_body(body)


async def write_frame(writer: asyncio.StreamWriter, obj: dict[str, Any]) -> None:
    writer.write(pack(obj))
    await writer.drain()


def check_request(msg: dict[str, Any]) -> tuple[Any, str, dict[str, Any]]:
    """Validate a request map, returning (id, method, params)."""
    if msg.get("v") != PROTOCOL_VERSION:
        raise FrameError(
            f"unsupported protocol version {msg.get('v')!r}; this daemon speaks {PROTOCOL_VERSION}",
            code="bad_version",
        )
    method = msg.get("method")
    if not isinstance(method, str) or not method:
        raise FrameError("request field 'method' must be a non-empty string")
    params = msg.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise FrameError("request field 'params' must be a map")
    return msg.get("id"), method, params


def request(req_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"v": PROTOCOL_VERSION, "id": req_id, "method": method, "params": params or {}}


def reply_ok(req_id: Any, result: Any) -> dict[str, Any]:
    return {"id": req_id, "result": result}


def reply_error(req_id: Any, error: dict[str, Any]) -> dict[str, Any]:
    return {"id": req_id, "error": error}
