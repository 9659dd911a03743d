"""The shared lookups of the storage map (nodeos/storage/lookup.py): found on a real map, the map's
own errors (with the field) when absent, and never a write into the map they read."""

from __future__ import annotations

import copy

import pytest

from nodeos.errors import AlreadyExists, NotFound
from nodeos.storage import lookup

from .test_storage_map import GiB, cluster, create


def test_names_resolve_by_kind_and_refuse_the_other_kinds() -> None:
    m = cluster(1)
    uuid = create(m, "vol1", 1)
    st = m.st
    vol = lookup.volume_by_name(st, "vol1")
    assert vol is st["volumes"][uuid]  # the map's own record, not a copy
    ref = lookup.ref_by_name(st, "vol1")
    assert ref == {"kind": "volume", "uuid": vol["uuid"]} and ref is not st["names"]["vol1"]
    with pytest.raises(NotFound) as e:
        lookup.snapshot_by_name(st, "vol1")
    assert e.value.field == "snapshot"
    with pytest.raises(NotFound):
        lookup.published_by_name(st, "vol1")
    with pytest.raises(NotFound) as e:
        lookup.volume_by_name(st, "nope", field="volume")
    assert e.value.field == "volume"
    with pytest.raises(AlreadyExists) as e:
        lookup.name_free(st, "vol1", "snapshot")
    assert e.value.field == "snapshot"
    lookup.name_free(st, "free")


def test_node_names_pool_keys_and_reports() -> None:
    m = cluster(1)
    uuid = create(m, "vol1", 1)
    pools = {"pool1": {"state": "ready", "size_bytes": 100 * GiB, "free_bytes": 99 * GiB}}
    m.report(1, pools=pools, replicas={uuid: {"state": "in-sync", "size_bytes": GiB}})
    st = m.st
    before = copy.deepcopy(st)
    assert lookup.node_name(st, 1) == "s1" and lookup.node_name(st, 99) == "node-99"
    assert lookup.pool_key(1, "p") == "1/p" and "1/p" in st["pools"]
    assert lookup.node_report(st, 99) == {} and lookup.reported(st, 99, "replicas") == {}
    assert lookup.replica_report(st, 99, uuid) == {} and lookup.replica_report(st, 1, "other") == {}
    assert lookup.replica_report(st, 1, uuid)["state"] == "in-sync"
    assert lookup.reported(st, 1, "pools")["pool1"]["free_bytes"] == 99 * GiB
    assert st == before  # reads only
