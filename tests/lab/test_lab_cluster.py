"""`nodeos-lab up --storage 3 --cluster`: the storage VMs form one cluster with no hand steps
(issue 8's lab), seen from every member, from `nodeos-lab status`, and used for a replicated
write. The lab is the shared "cluster3" one, so other cluster modules reuse this boot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nodeos_devtools.lab import Lab
from nodeos_devtools.lab.cluster import cluster_status, label_command_available
from nodeos_devtools.lab.plan import PEER_PORT
from tests.lab.node_helpers import ok

pytestmark = pytest.mark.lab
LAB = "cluster3"  # shared (tests/lab/shared_labs.py): s1..s3 formed into one cluster, h1
NAMES = ["s1", "s2", "s3"]


def test_every_storage_vm_sees_the_same_three_member_cluster(lab: Lab) -> None:
    views = {vm: cluster_status(lab, vm) for vm in lab.storage_vms}
    assert sorted(views) == NAMES
    assert len({v["cluster_id"] for v in views.values()}) == 1
    for vm, view in views.items():
        assert view["member"] is True, vm
        members = {m["name"]: m for m in view["members"]}
        assert sorted(members) == NAMES, view
        # Node name = VM name, peers on the lab network.
        for name, m in members.items():
            assert m["address"] == f"{lab.addr(name)}:{PEER_PORT}"
            assert m["raft"] in ("voter", "learner")
        assert next(m for m in view["members"] if m["is_self"])["name"] == vm
    leaders = {v["leader"] for v in views.values()}
    assert len(leaders) == 1 and None not in leaders


def test_lab_status_shows_the_leader_and_members(lab: Lab) -> None:
    st = lab.status()["cluster"]
    assert "error" not in st, st
    assert st["leader"] in NAMES
    assert [m["name"] for m in st["members"]] == NAMES
    out = subprocess.run(
        [sys.executable, "-c", "from nodeos_devtools.lab.cli import main; main()", "--name", lab.name,
         "status"],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout  # fmt: skip
    assert f"leader {st['leader']}" in out
    for vm in NAMES:
        assert any(line.split()[:1] == [vm] and ":7100" in line for line in out.splitlines()), out


def test_a_write_on_one_member_is_read_on_another(lab: Lab) -> None:
    ok(lab, "s2", "cluster", "kv", "put", "lab-cluster-test", "written-on-s2")
    got = ok(lab, "s3", "cluster", "kv", "get", "lab-cluster-test")
    assert "written-on-s2" in json.dumps(got)


@pytest.mark.skipif(not label_command_available(), reason="`nodeos node label` is not in this build yet")
def test_members_carry_their_rack_labels(lab: Lab) -> None:
    view = cluster_status(lab, "s1")
    racks = {m["name"]: (m.get("labels") or {}).get("rack") for m in view["members"]}
    assert racks == {"s1": "a", "s2": "b", "s3": "c"}
