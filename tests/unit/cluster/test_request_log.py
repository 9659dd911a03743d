"""A console request asked again after an unknown outcome is applied once (nodeos/cluster/request_log.py)."""

from __future__ import annotations

import msgpack

from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.cluster.request_log import MAX_REQUESTS


def _put(value: int, rid: str | None) -> bytes:
    return encode_command("kv_put", {"key": "k", "value": value}, rid=rid)


def test_the_same_request_twice_is_applied_once_and_answered_with_the_first_outcome() -> None:
    m = ClusterMap()
    first = m.apply(1, _put(1, "r1"))
    m.apply(2, _put(2, None))  # another client's write in between
    again = m.apply(3, _put(1, "r1"))  # the console's repeat: must not undo the write at index 2
    assert again == first == {"result": {"key": "k", "value": 1, "revision": 1}}
    assert m.kv_get("k") == 2
    assert m.applied_index == 3


def test_a_refused_request_asked_again_gets_the_same_refusal() -> None:
    m = ClusterMap()
    bad = encode_command("kv_put", {"key": "", "value": 1}, rid="r1")
    first = m.apply(1, bad)
    assert first["error"]["field"] == "key"
    assert m.apply(2, bad) == first
    assert len(m.state["rejected"]) == 1  # the repeat was not judged again


def test_the_record_keeps_the_newest_requests_by_index_whatever_the_dict_order() -> None:
    m = ClusterMap()
    for i in range(1, MAX_REQUESTS + 2):
        m.apply(i, _put(i, f"r{i}"))
    assert len(m.state["requests"]) == MAX_REQUESTS and "r1" not in m.state["requests"]
    # A restored map may hold its dicts in another order: the next eviction is the same.
    restored = ClusterMap()
    state = msgpack.unpackb(m.snapshot(), raw=False, strict_map_key=False)
    state["requests"] = dict(reversed(list(state["requests"].items())))
    restored.restore(msgpack.packb(state, use_bin_type=True))
    for mm in (m, restored):
        mm.apply(MAX_REQUESTS + 2, _put(0, "new"))
    assert m.state["requests"] == restored.state["requests"]
    assert "r2" not in m.state["requests"] and "r3" in m.state["requests"]


def test_a_recorded_result_does_not_follow_later_changes_of_what_it_was_taken_from() -> None:
    m = ClusterMap()
    first = m.apply(1, _put(1, "r1"))
    first["result"]["value"] = 99  # a result may be a record of the map, which changes later
    assert m.apply(2, _put(1, "r1"))["result"]["value"] == 1


def test_a_malformed_request_id_is_refused_naming_the_field() -> None:
    m = ClusterMap()
    out = m.apply(1, msgpack.packb({"cmd": "kv_put", "v": 1, "args": {"key": "k", "value": 1}, "rid": 7}))
    assert out["error"]["field"] == "rid"
    assert m.kv_get("k") is None
