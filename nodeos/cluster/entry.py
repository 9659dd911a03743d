"""How a proposal travels in a Raft entry: msgpack `[request id, command, time]`.

The request id lets the proposer find the result of its own entry; the time is the
proposer's (the leader's) clock when it proposed, which the map gives the events the command
records (the map reads no clock). Entries written before the time was added are
`[request id, command]` and still apply.
"""

from __future__ import annotations

import msgpack

BAD_COMMAND = b"\xc1"  # not msgpack: the map rejects it, the same way on every node


def frame(rid: bytes, command: bytes, at: float) -> bytes:
    return msgpack.packb([rid, command, at], use_bin_type=True)


def unframe(data: bytes) -> tuple[bytes, bytes, float | None]:
    """(request id, command, proposer's time or None) of an entry's data."""
    try:
        obj = msgpack.unpackb(data, raw=False)
    except Exception:
        return b"", data, None
    if not isinstance(obj, list) or len(obj) not in (2, 3):
        return b"", data, None
    rid, cmd = obj[0], obj[1]
    at = obj[2] if len(obj) == 3 and type(obj[2]) in (int, float) else None
    return (rid if isinstance(rid, bytes) else b""), (cmd if isinstance(cmd, bytes) else BAD_COMMAND), at


def command_name(cmd: bytes) -> str:
    try:
        obj = msgpack.unpackb(cmd, raw=False, strict_map_key=False)
    except Exception:
        return ""
    return obj.get("cmd", "") if isinstance(obj, dict) else ""
