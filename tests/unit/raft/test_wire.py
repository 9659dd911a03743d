"""Raft messages on the wire: msgpack-safe dicts, strictly validated on the way in."""

from __future__ import annotations

import msgpack
import pytest

from nodeos.cluster.raft import (
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    Message,
    MessageType,
    Snapshot,
    SnapshotMeta,
    decode_conf_change,
    encode_conf_change,
    from_wire,
    to_wire,
)
from nodeos.cluster.raft.types import LOCAL_TYPES, WIRE_TYPES


@pytest.mark.parametrize("t", sorted(WIRE_TYPES))
def test_every_wire_type_round_trips_through_msgpack(t: MessageType) -> None:
    m = Message(
        t,
        to=2,
        frm=1,
        term=7,
        log_term=6,
        index=41,
        entries=(Entry(6, 42, EntryType.NORMAL, b"cmd"), Entry(7, 43, EntryType.CONF_CHANGE, b"\x00")),
        commit=40,
        reject=True,
        reject_hint=12,
        snapshot=Snapshot(SnapshotMeta(30, 5, ConfState((1, 2, 3), (4,))), b"state"),
        context=b"ctx",
    )
    raw = msgpack.packb(to_wire(m), use_bin_type=True)
    assert from_wire(msgpack.unpackb(raw, raw=False)) == m


def test_heartbeat_stays_small() -> None:
    hb = Message(MessageType.HEARTBEAT, to=2, frm=1, term=3, commit=10)
    assert len(msgpack.packb(to_wire(hb))) < 60
    assert from_wire(to_wire(hb)) == hb


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(type=99), "type"),
        (lambda d: d.update(type=int(MessageType.HUP)), "type"),
        (lambda d: d.update(type="APP"), "type"),
        (lambda d: d.pop("to"), "to"),
        (lambda d: d.update(to=0), "to/from"),
        (lambda d: d.update(term=-1), "term"),
        (lambda d: d.update(term=1 << 64), "term"),
        (lambda d: d.update(index=1.5), "index"),
        (lambda d: d.update(commit=True), "commit"),
        (lambda d: d.update(reject="yes"), "reject"),
        (lambda d: d.update(entries={"a": 1}), "entries"),
        (lambda d: d.update(entries=[[1, 2, 3]]), "entries[0]"),
        (lambda d: d.update(entries=[[1, 2, 7, b""]]), "entries[0].type"),
        (lambda d: d.update(entries=[[1, 2, 0, "text"]]), "entries[0].data"),
        (lambda d: d.update(snapshot=[1]), "snapshot"),
        (
            lambda d: d.update(snapshot={"index": 1, "term": 1, "conf": {"voters": [0]}}),
            "snapshot.conf.voters",
        ),
        (lambda d: d.update(context="str"), "context"),
    ],
)
def test_malformed_message_is_refused_naming_the_field(mutate, field: str) -> None:
    d = to_wire(Message(MessageType.APP, to=2, frm=1, term=3, index=1, log_term=1, commit=1))
    mutate(d)
    with pytest.raises(ValueError) as exc:
        from_wire(d)
    assert str(exc.value).startswith(field)


def test_non_map_is_refused() -> None:
    with pytest.raises(ValueError, match="expected a map"):
        from_wire([1, 2, 3])


def test_local_types_are_not_wire_types() -> None:
    assert not (LOCAL_TYPES & WIRE_TYPES)
    assert MessageType.PROP in WIRE_TYPES  # followers forward proposals


def test_conf_change_payload_round_trip_and_validation() -> None:
    cc = ConfChange(ConfChangeType.ADD_LEARNER, 4, b"addr")
    assert decode_conf_change(encode_conf_change(cc)) == cc
    with pytest.raises(ValueError, match="conf change type"):
        decode_conf_change(msgpack.packb([9, 4, b""]))
    with pytest.raises(ValueError, match="node_id"):
        decode_conf_change(msgpack.packb([0, -4, b""]))
    with pytest.raises(ValueError, match="does not decode"):
        decode_conf_change(b"\xc1")
