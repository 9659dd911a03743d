"""Raft messages to and from msgpack-safe dicts (ints, bools, bytes, lists, dicts).

`from_wire` trusts nothing: every field is type-checked and a malformed message raises
ValueError naming the field, so a peer's garbage never reaches the state machine.
Local-only message types (HUP, BEAT, ...) are refused on the wire.
"""

from __future__ import annotations

from typing import Any

import msgpack

from .types import (
    NONE,
    WIRE_TYPES,
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    Message,
    MessageType,
    Snapshot,
    SnapshotMeta,
)

MAX_U64 = (1 << 64) - 1


def _entry_to_wire(e: Entry) -> list[Any]:
    return [e.term, e.index, int(e.type), e.data]


def _conf_state_to_wire(cs: ConfState) -> dict[str, Any]:
    return {"voters": list(cs.voters), "learners": list(cs.learners)}


def snapshot_to_wire(s: Snapshot) -> dict[str, Any]:
    return {
        "index": s.meta.index,
        "term": s.meta.term,
        "conf": _conf_state_to_wire(s.meta.conf_state),
        "data": s.data,
    }


def to_wire(msg: Message) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": int(msg.type),
        "to": msg.to,
        "from": msg.frm,
        "term": msg.term,
        "log_term": msg.log_term,
        "index": msg.index,
        "commit": msg.commit,
    }
    # Optional fields are left out when empty: heartbeats are the most frequent message.
    if msg.entries:
        out["entries"] = [_entry_to_wire(e) for e in msg.entries]
    if msg.reject:
        out["reject"] = True
    if msg.reject_hint:
        out["reject_hint"] = msg.reject_hint
    if msg.snapshot is not None:
        out["snapshot"] = snapshot_to_wire(msg.snapshot)
    if msg.context:
        out["context"] = msg.context
    return out


def _uint(d: dict[str, Any], key: str, where: str, default: int | None = 0) -> int:
    v = d.get(key, default)
    if v is None:
        raise ValueError(f"{where}{key}: required field missing")
    if type(v) is not int or not 0 <= v <= MAX_U64:
        raise ValueError(f"{where}{key}: expected an unsigned 64-bit int, got {type(v).__name__}")
    return v


def _bytes(d: dict[str, Any], key: str, where: str) -> bytes:
    v = d.get(key, b"")
    if not isinstance(v, bytes):
        raise ValueError(f"{where}{key}: expected bytes, got {type(v).__name__}")
    return v


def _ids(v: Any, where: str) -> tuple[int, ...]:
    if not isinstance(v, (list, tuple)):
        raise ValueError(f"{where}: expected a list of node ids, got {type(v).__name__}")
    for x in v:
        if type(x) is not int or not 0 < x <= MAX_U64:
            raise ValueError(f"{where}: node ids must be positive ints")
    return tuple(v)


def _entry_from_wire(v: Any, where: str) -> Entry:
    if not isinstance(v, (list, tuple)) or len(v) != 4:
        raise ValueError(f"{where}: expected [term, index, type, data]")
    term, index, etype, data = v
    for name, x in (("term", term), ("index", index)):
        if type(x) is not int or not 0 <= x <= MAX_U64:
            raise ValueError(f"{where}.{name}: expected an unsigned int")
    if type(etype) is not int or etype not in EntryType._value2member_map_:
        raise ValueError(f"{where}.type: expected one of {[int(t) for t in EntryType]}, got {etype!r}")
    if not isinstance(data, bytes):
        raise ValueError(f"{where}.data: expected bytes")
    return Entry(term, index, EntryType(etype), data)


def snapshot_from_wire(v: Any, where: str = "snapshot") -> Snapshot:
    if not isinstance(v, dict):
        raise ValueError(f"{where}: expected a map")
    conf = v.get("conf", {})
    if not isinstance(conf, dict):
        raise ValueError(f"{where}.conf: expected a map")
    cs = ConfState(
        _ids(conf.get("voters", []), f"{where}.conf.voters"),
        _ids(conf.get("learners", []), f"{where}.conf.learners"),
    )
    meta = SnapshotMeta(_uint(v, "index", f"{where}."), _uint(v, "term", f"{where}."), cs)
    return Snapshot(meta, _bytes(v, "data", f"{where}."))


def from_wire(d: Any) -> Message:
    """Decode and validate a message; raises ValueError on anything malformed."""
    if not isinstance(d, dict):
        raise ValueError(f"message: expected a map, got {type(d).__name__}")
    t = d.get("type")
    if type(t) is not int or t not in MessageType._value2member_map_ or MessageType(t) not in WIRE_TYPES:
        raise ValueError(f"type: expected one of {sorted(int(x) for x in WIRE_TYPES)}, got {t!r}")
    to = _uint(d, "to", "", None)
    frm = _uint(d, "from", "", None)
    if to == NONE or frm == NONE:
        raise ValueError("to/from: node ids must be positive")
    entries_raw = d.get("entries", [])
    if not isinstance(entries_raw, (list, tuple)):
        raise ValueError("entries: expected a list")
    entries = tuple(_entry_from_wire(e, f"entries[{i}]") for i, e in enumerate(entries_raw))
    reject = d.get("reject", False)
    if not isinstance(reject, bool):
        raise ValueError("reject: expected a bool")
    snap_raw = d.get("snapshot")
    snapshot = None if snap_raw is None else snapshot_from_wire(snap_raw)
    return Message(
        type=MessageType(t),
        to=to,
        frm=frm,
        term=_uint(d, "term", ""),
        log_term=_uint(d, "log_term", ""),
        index=_uint(d, "index", ""),
        entries=entries,
        commit=_uint(d, "commit", ""),
        reject=reject,
        reject_hint=_uint(d, "reject_hint", ""),
        snapshot=snapshot,
        context=_bytes(d, "context", ""),
    )


# --- conf change payloads (the data of EntryType.CONF_CHANGE entries) ---------------


def encode_conf_change(cc: ConfChange) -> bytes:
    return msgpack.packb([int(cc.type), cc.node_id, cc.context], use_bin_type=True)


def decode_conf_change(data: bytes) -> ConfChange:
    try:
        t, node_id, ctx = msgpack.unpackb(data, raw=False)
    except Exception as exc:
        raise ValueError(f"conf change: does not decode ({exc})") from None
    if type(t) is not int or t not in ConfChangeType._value2member_map_:
        raise ValueError(f"conf change type: expected one of {[int(x) for x in ConfChangeType]}, got {t!r}")
    if type(node_id) is not int or node_id <= 0:
        raise ValueError("conf change node_id: expected a positive int")
    if not isinstance(ctx, bytes):
        raise ValueError("conf change context: expected bytes")
    return ConfChange(ConfChangeType(t), node_id, ctx)
