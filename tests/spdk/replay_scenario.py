"""The scenario of the SPDK replay: the data plane's own operations, run in order against a REAL
nvmf_tgt by `python -m tests.spdk.record_replay` (which records every JSON-RPC exchange and each
step's outcome) and against the recorded exchanges by tests/unit/dataplane/test_spdk_replay.py.

Three targets: `R` a replica node (interrupt mode: pools, volumes, exports, hosts with
DH-HMAC-CHAP and TLS keys, referrals, ANA, snapshots and clones, QoS, deliberate mistakes), `P` a
primary (polling: bdev_nvme over TCP needs it) that attaches R's replica and builds raid1 over its
own lvol and that remote leg, freezes and thaws it, cuts the leg and rebuilds it, and `I` a
`--wait-for-rpc` target taken to running by target_setup.init. A step is one product call (or a
request sent through the product's `call`, its error mapping included) whose outcome is kept:
what it returned, or the nodeos error it raised. Only product code talks to the targets.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodeos.dataplane import mirror_names as names
from nodeos.dataplane.base import ExportSpec, HostAccess, Listener, MirrorSpec, NewVolume, RemoteSpec
from nodeos.dataplane.spdk import drives, resync, target_setup
from nodeos.dataplane.spdk import requests as rq
from nodeos.dataplane.spdk.backend import SpdkDataPlane
from nodeos.dataplane.spdk.mirror_plan import hold_name
from nodeos.errors import NodeosError
from nodeos.tlskey import TLS_SVCID, make_key
from nodeos.validate import make_dhchap_secret

MIB = 1024 * 1024
SIZE = 64 * MIB
VOL = "0b7e4c1a-6d2f-4a3b-8c9d-1e2f3a4b5c6d"  # the replicated volume
VOL2 = "5d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"  # plain volumes exported by R
PRIMARY_HOST = "nqn.2014-08.io.nodeos:node:c1:1"
OTHER_HOST = "nqn.2014-08.io.nodeos:node:c1:3"
HOST_ID = "6f1f9a52-1d1e-4f43-9a55-0e2a3b4c5d6e"
H1 = "nqn.2014-08.org.nvmexpress:uuid:11111111-1111-4111-8111-111111111111"
H2 = "nqn.2014-08.org.nvmexpress:uuid:22222222-2222-4222-8222-222222222222"
DHCHAP = make_dhchap_secret(bytes(range(32)))  # a fixed test key: the key file's name is its hash
TLS_PSK = make_key(bytes(range(32, 64)))
MID = names.mirror_id_for(VOL)
LOCAL = "nodeos_p/v1"
WAITING = "nodeos-000000000000000000000000"  # a raid1 whose members never come
WORK = "@WORK@"  # the recorder's work directory in the replay (key files live under it)
NODES = ("R", "P", "I")


@dataclass
class Ctx:
    """What the steps share: one data plane per node, the ports recorded with the replay."""

    work: str
    ports: dict[str, str]  # replica, front, export, discovery
    sockets: dict[str, str]  # node -> its RPC socket
    replaying: bool = False
    dps: dict[str, SpdkDataPlane] = field(default_factory=dict)
    remote_bdev: str = ""

    def dp(self, node: str) -> SpdkDataPlane:
        if node not in self.dps:
            self.dps[node] = SpdkDataPlane(
                self.sockets[node],
                keys_dir=f"{self.work}/keys-{node}",
                discovery_svcid=self.ports["discovery"] if node == "R" else None,
                transports=("tcp", "rdma"),
                timeout=30.0,
            )
        return self.dps[node]

    def close(self) -> None:
        for dp in self.dps.values():
            dp.close()

    def sleep(self, s: float) -> None:
        if not self.replaying:  # a replay answers at once; the loops end on the recorded answers
            time.sleep(s)

    def li(self, port: str) -> Listener:
        return Listener("tcp", "127.0.0.1", self.ports[port])

    def remote(self, host_nqn: str = PRIMARY_HOST, node_id: str = "2") -> RemoteSpec:
        return RemoteSpec(
            nqn=names.replica_nqn(VOL, node_id),
            listener=self.li("replica"),
            host_nqn=host_nqn,
            host_id=HOST_ID,
            nguid=names.replica_ids(VOL, "2")[1],
            reconnect_delay=1,
        )


Step = tuple[str, str, Callable[[Ctx], Any]]  # node, name, what it does


def outcome(value: Any, work: str) -> Any:
    """A step's result or error as JSON data, the work directory written as @WORK@."""

    def conv(v: Any) -> Any:
        if isinstance(v, NodeosError):
            return {"error": type(v).__name__, "field": v.field, "message": v.message}
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {
                "type": type(v).__name__,
                **{f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)},
            }
        if isinstance(v, dict):
            return {str(k): conv(x) for k, x in v.items()}
        if isinstance(v, list | tuple | set | frozenset):
            items = [conv(x) for x in v]
            return sorted(items, key=json.dumps) if isinstance(v, set | frozenset) else items
        return v

    return json.loads(json.dumps(conv(value), sort_keys=True).replace(work, WORK))


def run_step(step: Step, c: Ctx) -> Any:
    try:
        return outcome(step[2](c), c.work)
    except NodeosError as e:
        return outcome(e, c.work)


# ---- R: the replica node ---------------------------------------------------------------------
def replica_export(c: Ctx, hosts: tuple[HostAccess, ...] = (HostAccess(PRIMARY_HOST),)) -> ExportSpec:
    ruuid, rnguid = names.replica_ids(VOL, "2")
    return ExportSpec(
        nqn=names.replica_nqn(VOL, "2"),
        serial=rnguid[:20],
        pool_id="p",
        vol_id="v1",
        uuid=ruuid,
        nguid=rnguid,
        listeners=(c.li("replica"),),
        hosts=hosts,
    )


def vol_export(c: Ctx, vol_id: str, n: int, **kw: Any) -> ExportSpec:
    u = f"{VOL2[:-2]}{n:02d}"
    base: dict[str, Any] = {
        "nqn": names.volume_nqn(u),
        "serial": f"NODEOS{n:014d}",
        "pool_id": "p",
        "vol_id": vol_id,
        "uuid": u,
        "nguid": u.replace("-", ""),
        "listeners": (c.li("export"),),
        "hosts": (HostAccess(H1, dhchap_key=DHCHAP),),
    }
    return ExportSpec(**{**base, **kw})


def call(node: str, req: rq.Request) -> Callable[[Ctx], Any]:
    """A request sent through the product's call(): SPDK's answer, or its error as nodeos maps it."""
    return lambda c: c.dp(node).call(req)


def _wait_idle(c: Ctx) -> Any:
    """The rebuild onto the returned leg, polled until SPDK says it is done."""
    for _ in range(600):
        info = c.dp("P").mirror_status(MID)
        if info is None:
            raise AssertionError("the mirror is gone")
        if not info.degraded:
            return info
        c.sleep(0.2)
    raise AssertionError("the rebuild did not end")


R_STEPS: list[Step] = [
    ("R", "describe", lambda c: c.dp("R").describe()),  # RDMA refused: no RDMA device here
    ("R", "malloc drive M0", lambda c: c.dp("R").create_malloc_drive_for_tests("M0", 96 * MIB)),
    ("R", "malloc drive M1", lambda c: c.dp("R").create_malloc_drive_for_tests("M1", 96 * MIB)),
    ("R", "malloc drive M0 again", lambda c: c.dp("R").create_malloc_drive_for_tests("M0", 96 * MIB)),
    ("R", "pool p over two drives (raid0)", lambda c: c.dp("R").create_pool("p", ["M0", "M1"])),
    ("R", "pool p again", lambda c: c.dp("R").create_pool("p", ["M0", "M1"])),
    ("R", "pool over a missing drive", lambda c: c.dp("R").create_pool("q", ["NoSuchBdev"])),
    ("R", "raid0 over a missing drive", call("R", rq.raid0_create("nodeos_q_raid0", ["NoSuchBdev", "M0"]))),
    ("R", "lvstore on a missing bdev", call("R", rq.lvstore_create("NoSuchBdev", "nodeos_q"))),
    (
        "R",
        "aio drive over a missing file",
        lambda c: c.dp("R").create_aio_drive_for_tests("AIOx", "/nonexistent/nodeos-replay/missing.img"),
    ),
    ("R", "PCIe drive (no PCI scan here)", lambda c: c.dp("R").attach_nvme_pcie("0000:01:00.0")),
    ("R", "health of a missing controller", call("R", rq.nvme_health("nvme_0000010000"))),
    ("R", "PCIe drives: none", lambda c: drives.pcie_drives(c.dp("R"))),
    ("R", "detach PCIe drive: none held", lambda c: drives.detach_pcie(c.dp("R"), "0000:01:00.0")),
    ("R", "list pools", lambda c: c.dp("R").list_pools()),
    ("R", "volume v1", lambda c: c.dp("R").create_volume("p", "v1", SIZE)),
    ("R", "volume v1 again", lambda c: c.dp("R").create_volume("p", "v1", SIZE)),
    ("R", "volume v1 again, larger", lambda c: c.dp("R").create_volume("p", "v1", 2 * SIZE)),
    ("R", "volume in a missing pool", lambda c: c.dp("R").create_volume("nosuch", "v9", SIZE)),
    ("R", "volume v2", lambda c: c.dp("R").create_volume("p", "v2", 8 * MIB)),
    ("R", "resize v2", lambda c: c.dp("R").resize_volume("p", "v2", 12 * MIB)),
    ("R", "resize a missing lvol", call("R", rq.lvol_resize("nodeos_p/nosuch", 12 * MIB))),
    ("R", "export the replica to P", lambda c: c.dp("R").apply_export(replica_export(c))),
    ("R", "export the replica again", lambda c: c.dp("R").apply_export(replica_export(c))),
    (
        "R",
        "export v2: DH-HMAC-CHAP host, QoS",
        lambda c: c.dp("R").apply_export(vol_export(c, "v2", 2, qos_iops=2000, qos_mbps=10)),
    ),
    (
        "R",
        "export v2: TLS host on the TLS port, no QoS",
        lambda c: c.dp("R").apply_export(
            vol_export(
                c,
                "v2",
                2,
                listeners=(c.li("export"), Listener("tcp", "127.0.0.1", TLS_SVCID)),
                hosts=(HostAccess(H1, dhchap_key=DHCHAP), HostAccess(H2, tls_key=TLS_PSK)),
            )
        ),
    ),
    ("R", "export info v2", lambda c: c.dp("R").export_info(vol_export(c, "v2", 2).nqn)),
    ("R", "list exports", lambda c: c.dp("R").list_exports()),
    ("R", "QoS limit not a multiple of 1000", call("R", rq.set_qos_limit("nodeos_p/v2", 1500, 0))),
    (
        "R",
        "the QoS limit SPDK kept",
        lambda c: c.dp("R").call(rq.get_bdevs("nodeos_p/v2"))[0]["assigned_rate_limits"],
    ),
    ("R", "QoS limit on a missing bdev", call("R", rq.set_qos_limit("nodeos_p/nosuch", 1000, 0))),
    (
        "R",
        "ANA non-optimized",
        lambda c: c.dp("R").set_ana_state(vol_export(c, "v2", 2).nqn, 1, "non-optimized"),
    ),
    ("R", "fence v2, hosts dropped", lambda c: c.dp("R").fence_export(vol_export(c, "v2", 2).nqn, True)),
    ("R", "revoke H2", lambda c: c.dp("R").revoke_hosts(vol_export(c, "v2", 2).nqn, [H1])),
    (
        "R",
        "re-export v2: a new namespace identity, the TLS listener gone",
        lambda c: c.dp("R").apply_export(
            vol_export(c, "v2", 2, uuid=f"{VOL2[:-2]}99", nguid=f"{VOL2[:-2]}99".replace("-", ""))
        ),
    ),
    (
        "R",
        "ANA of a group no namespace is in",
        lambda c: c.dp("R").call(
            rq.set_ana_state(vol_export(c, "v2", 2).nqn, c.li("export"), "optimized", 9)
        ),
    ),
    (
        "R",
        "namespace to a missing nsid's group",
        lambda c: c.dp("R").call(rq.set_ns_ana_group(vol_export(c, "v2", 2).nqn, 5, 17)),
    ),
    ("R", "host of a missing subsystem", call("R", rq.add_host("nqn.2014-08.io.nodeos:vol:nosuch", H1))),
    (
        "R",
        "remove a host never added",
        lambda c: c.dp("R").call(rq.remove_host(vol_export(c, "v2", 2).nqn, H2)),
    ),
    (
        "R",
        "controllers of a missing subsystem",
        call("R", rq.get_controllers("nqn.2014-08.io.nodeos:vol:nosuch")),
    ),
    ("R", "delete a missing subsystem", call("R", rq.delete_subsystem("nqn.2014-08.io.nodeos:vol:nosuch"))),
    ("R", "key file missing", call("R", rq.keyring_add("nodeos-missing", "/nonexistent/nodeos-replay/key"))),
    ("R", "remove a missing key", call("R", rq.keyring_remove("nodeos-missing"))),
    ("R", "keys", call("R", rq.keyring_get_keys())),
    ("R", "config of an unknown subsystem", call("R", rq.get_config("nosuch"))),
    (
        "R",
        "listener removed that is not there",
        lambda c: c.dp("R").call(rq.remove_listener(vol_export(c, "v2", 2).nqn, c.li("front"))),
    ),
    (
        "R",
        "namespace removed that is not there",
        lambda c: c.dp("R").call(rq.remove_ns(vol_export(c, "v2", 2).nqn, 7)),
    ),
    (
        "R",
        "referrals set",
        lambda c: c.dp("R").set_referrals(
            c.li("discovery"), (Listener("tcp", "127.0.0.2", "8009"), Listener("tcp", "127.0.0.3", "8009"))
        ),
    ),
    ("R", "referrals listed", lambda c: c.dp("R").list_referrals(c.li("discovery"))),
    (
        "R",
        "referrals: one removed",
        lambda c: c.dp("R").set_referrals(c.li("discovery"), (Listener("tcp", "127.0.0.3", "8009"),)),
    ),
    (
        "R",
        "remove a referral never added",
        call("R", rq.remove_referral(Listener("tcp", "127.0.0.9", "8009"))),
    ),
    (
        "R",
        "create volumes v3, v4 with exports (pipelined), v1 taken",
        lambda c: c.dp("R").create_volumes(
            [
                NewVolume("p", "v3", 4 * MIB, vol_export(c, "v3", 3)),
                NewVolume("p", "v4", 4 * MIB, vol_export(c, "v4", 4, hosts=())),
                NewVolume("p", "v1", SIZE, None),
            ]
        ),
    ),
    (
        "R",
        "reapply exports (v3 ANA inaccessible)",
        lambda c: c.dp("R").reapply_exports(
            [vol_export(c, "v3", 3, ana_state="inaccessible"), vol_export(c, "v4", 4, hosts=())]
        ),
    ),
    ("R", "snapshot v2", lambda c: c.dp("R").snapshot_volume("p", "v2", "s2")),
    ("R", "snapshot v2 again", lambda c: c.dp("R").snapshot_volume("p", "v2", "s2")),
    ("R", "snapshot of a missing volume", lambda c: c.dp("R").snapshot_volume("p", "nosuch", "s9")),
    ("R", "clone s2", lambda c: c.dp("R").clone_snapshot("p", "s2", "c2")),
    ("R", "clone s2 again", lambda c: c.dp("R").clone_snapshot("p", "s2", "c2")),
    ("R", "clone a volume, not a snapshot", lambda c: c.dp("R").clone_snapshot("p", "v3", "c3")),
    ("R", "clone name taken", call("R", rq.lvol_clone("nodeos_p/s2", "v3"))),
    ("R", "list volumes", lambda c: c.dp("R").list_volumes("p")),
    ("R", "delete a snapshot with a clone", call("R", rq.lvol_delete("nodeos_p/s2"))),
    ("R", "delete an exported volume", lambda c: c.dp("R").delete_volume("p", "v3")),
    ("R", "delete clone c2", lambda c: c.dp("R").delete_volume("p", "c2")),
    ("R", "delete snapshot s2", lambda c: c.dp("R").delete_volume("p", "s2")),
    ("R", "stand-in view", lambda c: c.dp("R").block_view(names.view_id_for(MID), SIZE)),
    ("R", "stand-in view removed", lambda c: c.dp("R").remove_view(names.view_id_for(MID))),
    ("R", "null bdev deleted that is not there", call("R", rq.null_delete("nodeos-nosuch"))),
    ("R", "raid deleted that is not there", call("R", rq.raid_delete("nodeos-nosuch"))),
    ("R", "lvstore deleted that is not there", call("R", rq.lvstore_delete("nodeos_nosuch"))),
    ("R", "detach a controller never attached", call("R", rq.nvme_detach("nodeos_nosuch"))),
    ("R", "add a missing raid member", call("R", rq.raid_add_base("nodeos_p_raid0", "NoSuchBdev"))),
    ("R", "remove a missing raid member", call("R", rq.raid_remove_base("NoSuchBdev"))),
    ("R", "raids", call("R", rq.raid_get_bdevs("all"))),
    ("R", "unknown method", call("R", ("no_such_method", {}))),
]


# ---- P: the primary node (polling), a mirror over its lvol and R's replica ----------------------
def mirror(c: Ctx, create: bool = False, members: tuple[str, ...] | None = None) -> MirrorSpec:
    return MirrorSpec(MID, members or (LOCAL, c.remote_bdev), SIZE, data_offset_bytes=0, create=create)


def front_export(c: Ctx) -> ExportSpec:
    return ExportSpec(
        nqn=names.volume_nqn(VOL),
        serial="NODEOSFRONT000000001",
        pool_id="p",
        vol_id="v1",
        uuid=VOL,
        nguid=VOL.replace("-", ""),
        listeners=(c.li("front"),),
        hosts=(HostAccess(H1),),
        device=MID,
    )


def _attach(c: Ctx) -> str:
    c.remote_bdev = c.dp("P").attach_remote(c.remote())
    return c.remote_bdev


P_STEPS: list[Step] = [
    ("P", "describe", lambda c: c.dp("P").describe()),
    ("P", "malloc drive PM", lambda c: c.dp("P").create_malloc_drive_for_tests("PM", 96 * MIB)),
    ("P", "pool p over one drive", lambda c: c.dp("P").create_pool("p", ["PM"])),
    ("P", "volume v1", lambda c: c.dp("P").create_volume("p", "v1", SIZE)),
    (
        "P",
        "attach the replica as a host it does not admit",
        lambda c: c.dp("P").attach_remote(c.remote(OTHER_HOST)),
    ),
    ("P", "attach the replica", _attach),
    ("P", "attach the replica again", lambda c: c.dp("P").attach_remote(c.remote())),
    ("P", "remotes", lambda c: c.dp("P").list_remotes()),
    ("P", "no mirror yet", lambda c: c.dp("P").mirror_status(MID)),
    # SPDK makes a raid whose members are missing and waits for them (state configuring)
    ("P", "raid1 over missing members", call("P", rq.raid1_create(WAITING, ["NoSuchBdev", "NoSuchBdev2"]))),
    ("P", "raids: one waiting", call("P", rq.raid_get_bdevs("all"))),
    ("P", "delete the waiting raid", call("P", rq.raid_delete(WAITING))),
    ("P", "create the mirror (raid1)", lambda c: c.dp("P").assemble_mirror(mirror(c, create=True))),
    ("P", "mirrors", lambda c: c.dp("P").list_mirrors()),
    ("P", "rebuild limit 10 MiB/s", lambda c: c.dp("P").set_rebuild_limit(10240)),
    ("P", "rebuild limit off", lambda c: c.dp("P").set_rebuild_limit(None)),
    ("P", "export the mirror (front end)", lambda c: c.dp("P").apply_export(front_export(c))),
    ("P", "prepare a freeze (nothing held)", lambda c: c.dp("P").prepare_mirror_freeze(MID)),
    ("P", "freeze as prepared (one move)", lambda c: c.dp("P").freeze_mirror_writes(MID)),
    ("P", "read and thaw (one exchange)", lambda c: c.dp("P").read_and_thaw_mirror(MID)),
    ("P", "frozen after the read and thaw?", lambda c: c.dp("P").mirror_writes_frozen(MID)),
    ("P", "freeze (its own reads)", lambda c: c.dp("P").freeze_mirror_writes(MID)),
    ("P", "thaw right after (no read)", lambda c: c.dp("P").thaw_mirror_writes(MID)),
    ("P", "frozen after the quick thaw?", lambda c: c.dp("P").mirror_writes_frozen(MID)),
    ("P", "freeze the mirror's writes", lambda c: c.dp("P").freeze_mirror_writes(MID)),
    ("P", "frozen?", lambda c: c.dp("P").mirror_writes_frozen(MID)),
    ("P", "front end re-applied while frozen", lambda c: c.dp("P").apply_export(front_export(c))),
    ("P", "thaw", lambda c: c.dp("P").thaw_mirror_writes(MID)),
    ("P", "frozen after the thaw?", lambda c: c.dp("P").mirror_writes_frozen(MID)),
    ("P", "stop an exported mirror", lambda c: c.dp("P").stop_mirror(MID)),
    ("P", "detach a leg in a mirror", lambda c: c.dp("P").detach_remote(c.remote().nqn)),
    ("P", "cut the remote leg", lambda c: c.dp("P").cut_mirror_legs(MID, [c.remote().nqn])),
    ("P", "mirror degraded", lambda c: c.dp("P").mirror_status(MID)),
    ("P", "attach the replica back", _attach),
    ("P", "assemble: the leg added back (full copy)", lambda c: c.dp("P").assemble_mirror(mirror(c))),
    ("P", "rebuild done", _wait_idle),
    # issue 29: a live leg is cut with a tracking snapshot, and joins back by what it missed
    ("P", "drop the live remote leg (tracked)", lambda c: c.dp("P").drop_mirror_leg(MID, c.remote().nqn)),
    ("P", "attach the replica back (tracked)", _attach),
    ("P", "assemble: the leg joins by a partial resync", lambda c: c.dp("P").assemble_mirror(mirror(c))),
    ("P", "shallow copy of a missing lvol", call("P", resync.shallow_copy("nodeos_p/nosuch", "NoSuchBdev"))),
    ("P", "shallow copy status of an unknown operation", call("P", resync.check_shallow_copy(4242))),
    ("P", "drop the remote leg", lambda c: c.dp("P").drop_mirror_leg(MID, c.remote().nqn)),
    ("P", "remove the front end", lambda c: c.dp("P").remove_export(front_export(c).nqn)),
    ("P", "stop the mirror", lambda c: c.dp("P").stop_mirror(MID)),
    (
        "P",
        "assemble degraded (the remote missing)",
        lambda c: c.dp("P").assemble_mirror(mirror(c, members=(LOCAL, c.remote_bdev))),
    ),
    ("P", "stop the degraded mirror", lambda c: c.dp("P").stop_mirror(MID)),
    ("P", "hold bdev deleted that is not there", call("P", rq.null_delete(hold_name(MID, 1)))),
    ("P", "detach a remote no longer attached", lambda c: c.dp("P").detach_remote(c.remote().nqn)),
    ("P", "remotes at the end", lambda c: c.dp("P").list_remotes()),
    ("P", "delete v1", lambda c: c.dp("P").delete_volume("p", "v1")),
    ("P", "delete pool p", lambda c: c.dp("P").delete_pool("p")),
]

# ---- R again: an attach in interrupt mode, then everything removed -----------------------------
R_END: list[Step] = [
    ("R", "attach in interrupt mode", lambda c: c.dp("R").attach_remote(c.remote(node_id="2"))),
    ("R", "remove export v2", lambda c: c.dp("R").remove_export(vol_export(c, "v2", 2).nqn)),
    ("R", "remove export v3", lambda c: c.dp("R").remove_export(vol_export(c, "v3", 3).nqn)),
    ("R", "remove export v4", lambda c: c.dp("R").remove_export(vol_export(c, "v4", 4).nqn)),
    ("R", "remove the replica export", lambda c: c.dp("R").remove_export(replica_export(c).nqn)),
    ("R", "delete a pool that holds volumes", lambda c: c.dp("R").delete_pool("p")),
    ("R", "delete v1", lambda c: c.dp("R").delete_volume("p", "v1")),
    ("R", "delete v2", lambda c: c.dp("R").delete_volume("p", "v2")),
    ("R", "delete v3", lambda c: c.dp("R").delete_volume("p", "v3")),
    ("R", "delete v4", lambda c: c.dp("R").delete_volume("p", "v4")),
    ("R", "delete v4 again", lambda c: c.dp("R").delete_volume("p", "v4")),
    ("R", "delete pool p (and its raid0)", lambda c: c.dp("R").delete_pool("p")),
    (
        "R",
        "remove the DH-HMAC-CHAP key",
        lambda c: c.dp("R").call(rq.keyring_remove(c.dp("R")._key_name(H1, DHCHAP))),
    ),
    ("R", "pools at the end", lambda c: c.dp("R").list_pools()),
    ("R", "exports at the end", lambda c: c.dp("R").list_exports()),
]

# ---- I: a --wait-for-rpc target started by target_setup --------------------------------------
I_STEPS: list[Step] = [
    ("I", "init: subsystem limit 2048", lambda c: target_setup.init(c.sockets["I"], 2048, wait_s=30)),
    ("I", "init again (running)", lambda c: target_setup.init(c.sockets["I"], 2048, wait_s=30)),
    ("I", "subsystem limit once running", call("I", ("nvmf_set_max_subsystems", {"max_subsystems": 4096}))),
]

STEPS: list[Step] = [*R_STEPS, *P_STEPS, *R_END, *I_STEPS]
