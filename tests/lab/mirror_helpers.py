"""Helpers of the mirror lab test: one volume mirrored over s1 (primary), s2, s3 with the
kernel data plane, exported on all three; driven through nodeos.dataplane inside the VMs."""

from __future__ import annotations

import json
from typing import Any

from nodeos_devtools.lab import Lab

# The python the storage VMs run the data plane with (a scratch lab may point it elsewhere).
PY = ["python3", "-"]

PRELUDE = """
import json
from dataclasses import asdict
from nodeos.dataplane.base import ExportSpec, HostAccess, Listener, MirrorSpec, RemoteSpec
from nodeos.dataplane.kernel import KernelDataPlane
from nodeos.dataplane import mirror_names as mn
from nodeos.errors import NodeosError
d = KernelDataPlane()
def out(x):
    print("@@" + json.dumps(x, default=lambda o: asdict(o) if hasattr(o, "__dataclass_fields__") else str(o)))
try:
{body}
except NodeosError as e:
    out({{"error": type(e).__name__, **e.to_dict()}})
"""

MIB = 1024 * 1024
VOL = "5b0e7c1d-2a3f-4e5d-8c7b-6a5f4e3d2c1b"
VOL_ID = VOL.replace("-", "")
VOL_SIZE = 64 * MIB
POOL = "p1"
# Host initiator settings for fast failover (docs/dataplane.md): detect a dead path in ~5 s,
# give up on it after 30 s, and keep queued I/O (no fast-fail) so multipath moves it instead
# of failing it to the application.
HOST_OPTS = ["--keep-alive-tmo=5", "--ctrl-loss-tmo=30", "--reconnect-delay=2"]


def dp(lab: Lab, vm: str, body: str, timeout: float = 600) -> Any:
    code = PRELUDE.format(body="\n".join("    " + line for line in body.strip().splitlines()))
    r = lab.exec(vm, PY, input=code, timeout=timeout)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("@@")]
    if r.rc != 0 or not lines:
        raise AssertionError(
            f"{vm}: python exited {r.rc}\nstdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}"
        )
    return json.loads(lines[-1][2:])


def ok(got: Any) -> Any:
    assert not (isinstance(got, dict) and "error" in got), got
    return got


def replica_export(lab: Lab, vm: str, primary: str) -> dict[str, Any]:
    """vm's replica LV exported to `primary` only, under its replica NQN and fixed ids."""
    addr, host = lab.addr(vm), lab.spec(primary).hostnqn
    return ok(
        dp(
            lab,
            vm,
            f"""
nqn = mn.replica_nqn({VOL!r}, {vm!r})
u, g = mn.replica_ids({VOL!r}, {vm!r})
d.create_volume({POOL!r}, {VOL_ID!r}, mn.member_size_bytes({VOL_SIZE}))
out(d.apply_export(ExportSpec(nqn=nqn, serial="NODEOSREP-{vm}", pool_id={POOL!r}, vol_id={VOL_ID!r},
    uuid=u, nguid=g, listeners=(Listener("tcp", {addr!r}, "4420"),), hosts=(HostAccess({host!r}),))))""",
        )
    )


def front_end_code(lab: Lab, vm: str, index: int, device: str, optimized: bool) -> str:
    """The volume's front-end export on vm: same NQN, serial and ids everywhere."""
    grp = "mn.ANA_GROUP_OPTIMIZED" if optimized else "mn.ANA_GROUP_INACCESSIBLE"
    state = "optimized" if optimized else "inaccessible"
    lo, hi = 1 + index * 1000, (index + 1) * 1000
    return f"""
fe = d.apply_export(ExportSpec(nqn=mn.volume_nqn({VOL!r}), serial="NODEOSMIRROR01", pool_id={POOL!r},
    vol_id={VOL_ID!r}, uuid={VOL!r}, nguid={VOL_ID!r}, listeners=(Listener("tcp", {lab.addr(vm)!r}, "4420"),),
    hosts=(HostAccess({lab.spec("h1").hostnqn!r}),), ana_group={grp}, ana_state={state!r},
    cntlid_min={lo}, cntlid_max={hi}, device={device}))
d.set_referrals(Listener("tcp", {lab.addr(vm)!r}, "8009"),
    tuple(Listener("tcp", a, "8009") for a in {[lab.addr(s) for s in lab.storage_vms if s != vm]!r}))"""


def remote_code(lab: Lab, replica: str, primary: str) -> str:
    spec = lab.spec(primary)
    return f"""RemoteSpec(nqn=mn.replica_nqn({VOL!r}, {replica!r}),
    listener=Listener("tcp", {lab.addr(replica)!r}, "4420"), host_nqn={spec.hostnqn!r},
    host_id={spec.hostid!r}, nguid=mn.replica_ids({VOL!r}, {replica!r})[1],
    keep_alive_tmo=3, ctrl_loss_tmo=30, fast_io_fail_tmo=0)"""


def leg_md5(lab: Lab, vm: str) -> str:
    """md5 of the volume region (data offset, volume size) of vm's own leg."""
    script = (
        f"dd if=/dev/{'nodeos_' + POOL}/v_{VOL_ID} bs=1M skip=8 count={VOL_SIZE // MIB} "
        "iflag=direct status=none | md5sum | cut -d' ' -f1"
    )
    return lab.sh(vm, script, timeout=300).stdout.strip()


def host_paths(lab: Lab, nqn: str, host: str = "h1") -> list[dict[str, str]]:
    """The GPU node's paths (controllers) to `nqn`: name, address, state, ANA state and transport."""
    script = f"""
for s in /sys/class/nvme-subsystem/nvme-subsys*; do
  [ "$(cat $s/subsysnqn)" = "{nqn}" ] || continue
  for c in $s/nvme[0-9]*; do
    [ -e $c/address ] || continue
    ana=$(cat $c/nvme*c*n1/ana_state 2>/dev/null || echo none)
    echo "$(basename $c)|$(cat $c/address)|$(cat $c/state)|$ana|$(cat $c/transport)"
  done
done"""
    out = []
    for line in lab.sh(host, script).stdout.split():
        name, address, state, ana, transport = line.split("|")
        out.append({"name": name, "address": address, "state": state, "ana": ana, "transport": transport})
    return out
