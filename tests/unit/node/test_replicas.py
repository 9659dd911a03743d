"""A replicated volume's data plane objects on each node, from the map (pure)."""

from __future__ import annotations

import itertools
from typing import Any

from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.dataplane import mirror_names as names
from nodeos.dataplane.base import Listener
from nodeos.dataplane.kernel.backend import KernelDataPlane
from nodeos.dataplane.spdk.backend import SpdkDataPlane
from nodeos.node import model, replicas

GiB = 1 << 30
UUID = "5b0e7c1d-2a3f-4e5d-8c7b-6a5f4e3d2c1b"
LST = (Listener("tcp", "10.0.0.9", "4420"),)


def three_node_map() -> dict[str, Any]:
    m = ClusterMap()
    cmds = [("init_cluster", {"cluster_id": "c" * 32})]
    for n in (1, 2, 3):
        cmds += [
            ("add_node", {"node_id": n, "name": f"s{n}"}),
            (
                "pool_create",
                {"node_id": n, "name": "p", "pool_id": f"pool{n}", "drives": ["d"], "devices": ["/x"]},
            ),
            (
                "node_report",
                {
                    "node_id": n,
                    "seq": 1,
                    "pools": {f"pool{n}": {"state": "ready", "size_bytes": GiB}},
                    "dataplane": {
                        "listeners": [
                            {"trtype": "tcp", "traddr": f"10.0.0.{n}", "trsvcid": "4420", "adrfam": "ipv4"}
                        ]
                    },
                },
            ),
        ]
    cmds.append(
        (
            "volume_create",
            {
                "uuid": UUID,
                "name": "v",
                "nqn": names.volume_nqn(UUID),
                "size_bytes": 64 << 20,
                "placement": [{"node": n, "pool_id": f"pool{n}"} for n in (2, 1, 3)],
            },
        )
    )
    for i, (c, a) in enumerate(cmds, start=1):
        assert "error" not in m.apply(i, encode_command(c, a))
    return m.state


def local(st: dict[str, Any], me: int, device: str) -> dict[str, Any]:
    from nodeos.agent.plan import local_volume

    return dict(local_volume(st, st["volumes"][UUID], me), device=device, hosts=["nqn.2014-08.com.example:h"])


def test_every_node_exports_the_same_front_end_with_its_own_ana_state_and_controller_ids() -> None:
    st = three_node_map()
    hosts = {"nqn.2014-08.com.example:h": {"dhchap_secret": None}}
    specs = {n: model.export_spec(local(st, n, f"/dev/x{n}"), LST, hosts) for n in (1, 2, 3)}
    assert {(s.nqn, s.serial, s.uuid, s.nguid) for s in specs.values()} == {
        (names.volume_nqn(UUID), UUID.replace("-", "")[:20], UUID, UUID.replace("-", ""))
    }
    assert (
        specs[2].ana_state == "optimized" and specs[2].ana_group == names.ANA_GROUP_OPTIMIZED
    )  # the primary
    assert {specs[1].ana_state, specs[3].ana_state} == {"inaccessible"}
    ranges = sorted((s.cntlid_min, s.cntlid_max) for s in specs.values())
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges)) and ranges[-1][1] <= 0xFFEF
    assert [specs[n].device for n in (1, 2, 3)] == ["/dev/x1", "/dev/x2", "/dev/x3"]


def test_a_replica_is_exported_to_the_primarys_initiator_only_with_fixed_ids() -> None:
    st = three_node_map()
    rec = local(st, 3, "/dev/view")
    spec = replicas.replica_spec(rec, 3, LST)
    assert [h.host_nqn for h in spec.hosts] == [replicas.node_host_nqn("c" * 32, 2)]
    assert (spec.uuid, spec.nguid) == names.replica_ids(UUID, "3") and spec.device is None
    assert spec.nqn == names.replica_nqn(UUID, "3")


def test_the_primary_attaches_its_secondaries_in_placement_order_at_their_storage_addresses() -> None:
    st = three_node_map()
    rec = local(st, 2, "/dev/md")
    assert rec["role"] == "primary" and rec["slot"] == 0
    specs = replicas.remote_specs(rec)
    assert [(s.nqn, s.listener.traddr) for s in specs] == [
        (names.replica_nqn(UUID, "1"), "10.0.0.1"),
        (names.replica_nqn(UUID, "3"), "10.0.0.3"),
    ]
    assert all(s.host_nqn == replicas.node_host_nqn("c" * 32, 2) for s in specs)
    assert len({s.host_id for s in specs}) == 1 and specs[0].host_id != replicas.node_host_id("other")
    md = KernelDataPlane.mirror_caps
    m = replicas.mirror_spec(rec, ["/dev/lv", "/dev/nvme1n1", "/dev/nvme2n1"], create=True, caps=md)
    assert m.size_bytes == 64 << 20 and m.data_offset_bytes == names.MIRROR_DATA_OFFSET
    assert replicas.lv_size(rec, md) == names.member_size_bytes(64 << 20)


def test_on_spdk_members_are_exactly_the_volume_and_data_starts_at_zero() -> None:
    rec = local(three_node_map(), 2, "nodeos-x")
    spdk = SpdkDataPlane.mirror_caps
    assert replicas.lv_size(rec, spdk) == 64 << 20
    assert replicas.mirror_spec(rec, ["p/v", "c_n1"], create=False, caps=spdk).data_offset_bytes == 0
    assert not spdk.views and spdk.write_freeze  # the front end is held (spdk/freeze.py)
    # a clone's legs carry no superblock of its origin on SPDK: nothing to adopt
    clone = {**rec, "adopt_uuid": "0f0e0d0c-0b0a-0908-0706-050403020100"}
    assert replicas.mirror_spec(clone, ["p/v", "c_n1"], create=True, caps=spdk).adopt_uuid is None


def test_a_fenced_node_exports_its_primary_front_end_inaccessible() -> None:
    st = three_node_map()
    hosts = {"nqn.2014-08.com.example:h": {"nqn": "nqn.2014-08.com.example:h"}}
    prim = local(st, 2, "/dev/md/x")
    assert model.export_spec(prim, LST, hosts).ana_state == "optimized"
    fenced = model.export_spec(prim, LST, hosts, fenced=True)
    assert (fenced.ana_state, fenced.ana_group) == ("inaccessible", names.ANA_GROUP_INACCESSIBLE)
    assert fenced.device == "/dev/md/x"  # same namespace, only its ANA group moves
    single = {**prim, "replicas": 1}
    assert model.export_spec(single, LST, hosts, fenced=True).ana_state == "optimized"


def test_the_primary_reports_each_leg_by_its_attached_device_with_rebuild_progress() -> None:
    from nodeos.dataplane.base import MirrorInfo, MirrorMember, RemoteInfo
    from nodeos.node.mirror_ops import leg_states

    st = three_node_map()
    st["volumes"][UUID]["primary"] = 1  # after a failover: node 1 holds md slot 1, not 0
    prim = local(st, 1, "/dev/mapper/v")
    info = MirrorInfo(
        mirror_id=names.mirror_id_for(UUID),
        device="/dev/md127",
        size_bytes=64 << 20,
        degraded=True,
        members=(
            MirrorMember(slot=0, device="/dev/nvme2n1", state="rebuilding", progress=0.25),
            MirrorMember(slot=1, device="/dev/mapper/lv", state="in_sync"),
            MirrorMember(slot=2, device="/dev/nvme1n1", state="in_sync"),
        ),
        array_state="clean",
        sync_action="recover",
    )
    remotes = [
        RemoteInfo(names.replica_nqn(UUID, "2"), None, "live", "/dev/nvme2n1", None),
        RemoteInfo(names.replica_nqn(UUID, "3"), None, "live", "/dev/nvme1n1", None),
    ]
    assert leg_states(info, prim, remotes) == ({2: "syncing", 3: "in-sync"}, {2: 0.25})
    assert leg_states(info, prim, remotes[1:]) == ({2: "failed", 3: "in-sync"}, {})
    # without the remotes' devices: by placement slot (node 2 is slot 0, node 3 slot 2)
    assert leg_states(info, prim) == ({2: "syncing", 3: "in-sync"}, {2: 0.25})
    # a leg whose controller has not been live for too long (its I/O blocks): failed, whatever md says
    assert leg_states(info, prim, remotes, down={3}) == ({2: "syncing", 3: "failed"}, {2: 0.25})


def test_a_secondary_whose_front_end_lags_a_grow_withholds_its_namespace() -> None:
    """Between a grow's "legs" and "front" steps a secondary's front end is smaller than the
    volume: a host that scanned that path last would set the primary's path aside for good
    (Linux clears every path whose size differs from the multipath device's), so its namespace
    is withheld until it is back at the new size. The primary's never is."""
    st = three_node_map()
    hosts = {"nqn.2014-08.com.example:h": {"dhchap_secret": None}}
    grown = 128 << 20
    for n in (1, 2, 3):
        steady = local(st, n, f"/dev/x{n}")
        assert model.export_spec(steady, LST, hosts).ns_enabled
        lagging = dict(steady, size_bytes=grown, front_bytes=64 << 20)
        assert model.export_spec(lagging, LST, hosts).ns_enabled is (n == 2)  # node 2 is the primary
        caught_up = dict(steady, size_bytes=grown, front_bytes=grown)
        assert model.export_spec(caught_up, LST, hosts).ns_enabled
