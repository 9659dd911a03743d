"""The end-to-end demo (and the steps the lab tests reuse).

The storage VM's export is made the way an operator makes it: the `nodeos` CLI inside the VM
asks its `nodeosd` for a pool over the drives, registers the GPU node's host NQN, creates a thin
volume and grants it (`NodeosExporter`). `KernelTargetExporter` does the same by hand with LVM
thin and nvmet configfs (`nodeos-lab demo --by-hand`), to tell a daemon problem from a lab one.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from nodeos.errors import OperationFailed
from nodeos_devtools.lab.lab import Lab

PORT = 4420
DEMO_MIB = 32


def say(msg: str) -> None:
    print(f"demo: {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Export:
    nqn: str  # subsystem NQN the host connects to
    addr: str  # storage VM address
    port: int
    transports: tuple[str, ...]  # ("tcp", "rdma")
    device: str  # backing block device on the storage VM
    size_mib: int


class Exporter(Protocol):
    def export(self, lab: Lab, vm: str, *, name: str, size_mib: int, hostnqn: str) -> Export: ...

    def unexport(self, lab: Lab, vm: str, export: Export) -> None: ...


def drive_path(serial: str) -> str:
    """The stable block device path of a lab drive inside its VM (udev by-id link)."""
    return f"/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_{serial}"


class KernelTargetExporter:
    """LVM thin volume on the VM's first drive, exported with nvmet over TCP and RDMA."""

    def export(self, lab: Lab, vm: str, *, name: str, size_mib: int, hostnqn: str) -> Export:
        vg = "demo"
        drive = drive_path(lab.serials(vm)[0])
        vol_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"nodeos-demo/{lab.name}/{vm}/{name}"))
        # Not nodeosd's own prefix (nqn.2014-08.io.nodeos:vol:): nodeosd removes exports of
        # that prefix it does not know, and this one is made by hand, beside the daemon.
        nqn = f"nqn.2014-08.io.nodeos.lab:demo:{vol_uuid}"
        addr = lab.addr(vm)
        say(f"{vm}: LVM thin pool on {drive}, thin volume {vg}/{name} of {size_mib} MiB")
        lab.sh(
            vm,
            f"""
            test -b {drive}
            vgs {vg} >/dev/null 2>&1 || {{ pvcreate -ff -y {drive}; vgcreate {vg} {drive}; }}
            lvs {vg}/pool >/dev/null 2>&1 || lvcreate -q -y --type thin-pool -l 90%FREE -n pool {vg}
            lvs {vg}/{name} >/dev/null 2>&1 || lvcreate -q -y -V {size_mib}M -T {vg}/pool -n {name}
            lvchange -ay -K {vg}/{name}
            """,
            timeout=300,
        )
        dev = f"/dev/{vg}/{name}"
        say(f"{vm}: nvmet subsystem {nqn}, namespace 1 = {dev}, only {hostnqn} allowed")
        cfs = "/sys/kernel/config/nvmet"
        sub = f"{cfs}/subsystems/{nqn}"
        lab.sh(
            vm,
            f"""
            mkdir -p {sub}
            echo 0 > {sub}/attr_allow_any_host
            mkdir -p {cfs}/hosts/{hostnqn}
            [ -e {sub}/allowed_hosts/{hostnqn} ] || ln -s {cfs}/hosts/{hostnqn} {sub}/allowed_hosts/
            mkdir -p {sub}/namespaces/1
            if [ "$(cat {sub}/namespaces/1/enable)" = 0 ]; then
              echo {dev} > {sub}/namespaces/1/device_path
              echo {vol_uuid} > {sub}/namespaces/1/device_uuid
              echo 1 > {sub}/namespaces/1/enable
            fi
            """,
        )
        for i, tr in enumerate(("tcp", "rdma"), start=1):
            say(f"{vm}: nvmet port {i}: {tr} {addr}:{PORT}")
            port = f"{cfs}/ports/{i}"
            lab.sh(
                vm,
                f"""
                if [ ! -d {port} ]; then
                  mkdir {port}
                  echo ipv4 > {port}/addr_adrfam
                  echo {tr} > {port}/addr_trtype
                  echo {addr} > {port}/addr_traddr
                  echo {PORT} > {port}/addr_trsvcid
                fi
                [ -e {port}/subsystems/{nqn} ] || ln -s {sub} {port}/subsystems/
                """,
            )
        return Export(
            nqn=nqn, addr=addr, port=PORT, transports=("tcp", "rdma"), device=dev, size_mib=size_mib
        )

    def unexport(self, lab: Lab, vm: str, export: Export) -> None:
        cfs = "/sys/kernel/config/nvmet"
        sub = f"{cfs}/subsystems/{export.nqn}"
        lab.sh(
            vm,
            f"""
            for p in {cfs}/ports/*; do rm -f $p/subsystems/{export.nqn}; done
            rmdir {cfs}/ports/* 2>/dev/null || true
            echo 0 > {sub}/namespaces/1/enable
            rmdir {sub}/namespaces/1
            rm -f {sub}/allowed_hosts/*
            rmdir {sub}
            """,
        )
        # The drive as export() found it: no volume group left for nodeosd to trip over.
        vg = export.device.split("/")[2]
        lab.sh(
            vm,
            f"""
            pvs=$(pvs --noheadings -o pv_name -S vg_name={vg} 2>/dev/null || true)
            vgremove -f -y {vg} >/dev/null 2>&1 || true
            for pv in $pvs; do pvremove -ff -y "$pv" >/dev/null; wipefs -a -q "$pv"; done
            """,
            timeout=300,
        )


class NodeosExporter:
    """The product path: `nodeos ... --json` inside the storage VM, served by its nodeosd."""

    POOL = "demo"

    def _nodeos(self, lab: Lab, vm: str, *args: str, quiet: bool = False) -> Any:
        if not quiet:
            say(f"{vm}: nodeos {' '.join(args)}")
        r = lab.exec(vm, ["nodeos", *args, "--json"], timeout=600)
        if r.rc != 0:
            raise OperationFailed(
                f"{vm}: `nodeos {' '.join(args)}` failed (exit {r.rc}): {r.stdout}{r.stderr}"
            )
        return json.loads(r.stdout)

    def export(self, lab: Lab, vm: str, *, name: str, size_mib: int, hostnqn: str) -> Export:
        say(f"{vm}: waiting for nodeosd to answer")
        lab.sh(vm, "t=0; until nodeos status --json >/dev/null 2>&1; do t=$((t+1)); "
                   "[ $t -gt 900 ] && exit 1; sleep 1; done", timeout=960)  # fmt: skip
        st = self._nodeos(lab, vm, "status", quiet=True)
        say(f"{vm}: nodeosd runs the {st['dataplane']['name']} data plane")
        if not any(p["name"] == self.POOL for p in self._nodeos(lab, vm, "pool", "list", quiet=True)):
            self._nodeos(lab, vm, "pool", "create", self.POOL, "--drives", "all")
        if not any(h["nqn"] == hostnqn for h in self._nodeos(lab, vm, "host", "list", quiet=True)):
            self._nodeos(lab, vm, "host", "add", hostnqn)
        if not any(v["name"] == name for v in self._nodeos(lab, vm, "volume", "list", quiet=True)):
            self._nodeos(lab, vm, "volume", "create", name, "--size", f"{size_mib}MiB", "--pool", self.POOL)
        self._nodeos(lab, vm, "volume", "grant", name, "--host", hostnqn)
        vol = self._nodeos(lab, vm, "volume", "show", name)
        listeners = [x for x in vol["listeners"] if x["traddr"] == lab.addr(vm)]
        say(
            f"{vm}: {vol['nqn']} listens on "
            + ", ".join(f"{x['trtype']} {x['traddr']}:{x['trsvcid']}" for x in listeners)
        )
        dev = lab.sh(vm, f"lvs --noheadings -o lv_path -S lv_name=v_{vol['vol_id']}").stdout.strip()
        return Export(
            nqn=vol["nqn"],
            addr=lab.addr(vm),
            port=int(listeners[0]["trsvcid"]),
            transports=tuple(sorted({x["trtype"] for x in listeners})),
            device=dev,
            size_mib=size_mib,
        )

    def unexport(self, lab: Lab, vm: str, export: Export) -> None:
        vols = self._nodeos(lab, vm, "volume", "list", quiet=True)
        for v in vols:
            if v.get("nqn") == export.nqn:
                self._nodeos(lab, vm, "volume", "delete", v["name"], "--force")


def connect(lab: Lab, host: str, export: Export, transport: str, timeout: float = 120) -> str:
    """`nvme connect` from host; returns the namespace's block device (multipath head)."""
    say(f"{host}: nvme connect -t {transport} -a {export.addr} -s {export.port} -n {export.nqn}")
    lab.exec(
        host,
        ["nvme", "connect", "-t", transport, "-a", export.addr, "-s", str(export.port), "-n", export.nqn],
        timeout=timeout,
        check=True,
    )
    return namespace_device(lab, host, export.nqn, timeout=timeout)


def namespace_device(lab: Lab, host: str, nqn: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    script = (
        "for s in /sys/class/nvme-subsystem/*; do "
        f'[ "$(cat $s/subsysnqn 2>/dev/null)" = {shlex.quote(nqn)} ] || continue; '
        "for n in $s/nvme*n*; do [ -e $n ] && basename $n; done; done"
    )
    while True:
        out = lab.exec(host, ["sh", "-c", script], timeout=30).stdout.split()
        if out:
            return f"/dev/{sorted(out)[0]}"
        if time.monotonic() > deadline:
            raise OperationFailed(f"{host}: no block device for {nqn} after connecting")
        time.sleep(1)


def disconnect(lab: Lab, host: str, nqn: str) -> None:
    say(f"{host}: nvme disconnect -n {nqn}")
    lab.exec(host, ["nvme", "disconnect", "-n", nqn], timeout=120, check=True)


def write_random(lab: Lab, vm: str, dev: str, mib: int = DEMO_MIB, seek_mib: int = 0) -> str:
    """Write mib MiB of fresh random data to dev (direct I/O, flushed); returns its sha256."""
    r = lab.sh(
        vm,
        f"""
        head -c {mib}M /dev/urandom > /run/demo.data
        dd if=/run/demo.data of={dev} bs=1M seek={seek_mib} count={mib} oflag=direct conv=fsync status=none
        sha256sum < /run/demo.data | cut -d' ' -f1
        rm -f /run/demo.data
        """,
        timeout=600,
    )
    return r.stdout.strip()


def read_sha(lab: Lab, vm: str, dev: str, mib: int = DEMO_MIB, skip_mib: int = 0) -> str:
    r = lab.sh(
        vm,
        f"dd if={dev} bs=1M skip={skip_mib} count={mib} iflag=direct status=none | sha256sum | cut -d' ' -f1",
        timeout=600,
    )
    return r.stdout.strip()


def check(cond: bool, what: str) -> None:
    if not cond:
        raise OperationFailed(f"demo check failed: {what}")
    say(f"OK: {what}")


MIRROR_OFFSET_MIB = 8  # nodeos.dataplane.mirror_names.MIRROR_DATA_OFFSET


def multipath_device(
    lab: Lab, host: str, nqn: str, paths: int, timeout: float = 300
) -> tuple[str, list[str]]:
    """The host's one block device for `nqn` once it has `paths` live paths; (device, ANA states)."""
    script = f"""
for s in /sys/class/nvme-subsystem/nvme-subsys*; do
  [ "$(cat $s/subsysnqn)" = {shlex.quote(nqn)} ] || continue
  for c in $s/nvme[0-9]*; do
    [ "$(cat $c/state 2>/dev/null)" = live ] || continue
    echo "P $(cat $c/nvme*c*n1/ana_state 2>/dev/null || echo none)"
  done
  for n in $s/nvme*n1; do [ -e $n ] && echo "D $(basename $n)"; done
done"""
    deadline = time.monotonic() + timeout
    while True:
        lines = [ln.split() for ln in lab.sh(host, script).stdout.splitlines()]
        states = [x[1] for x in lines if x[0] == "P" and x[1] in ("optimized", "inaccessible")]
        devs = [x[1] for x in lines if x[0] == "D"]
        if len(states) >= paths and devs:
            return f"/dev/{devs[0]}", states
        if time.monotonic() > deadline:
            raise OperationFailed(f"{host}: no multipath device with {paths} paths for {nqn}: {lines}")
        time.sleep(2)


def replicated_part(lab: Lab, hostnqn: str) -> None:
    """Three storage VMs on racks a/b/c: a 3-replica volume, one device with three paths on h1."""
    nodeos = NodeosExporter()
    for vm in ("s2", "s3"):
        nodeos._nodeos(lab, vm, "pool", "create", NodeosExporter.POOL, "--drives", "all")
    nodes = nodeos._nodeos(lab, "s2", "node", "list", quiet=True)
    say(
        "cluster: "
        + ", ".join(f"{n['name']} rack={n['labels'].get('rack', '-')} ({n['raft']})" for n in nodes)
    )
    vol = nodeos._nodeos(lab, "s2", "volume", "create", "rvol", "--size", "64MiB", "--replicas", "3",
                         "--spread", "rack")  # fmt: skip
    reps = ", ".join(f"{r['node']} {r['state']} ANA {r['ana_state']}" for r in vol["replicas"])
    say(f"rvol: primary {vol['primary']}, replicas {reps}")
    nodeos._nodeos(lab, "s2", "volume", "grant", "rvol", "--host", hostnqn)
    other = next(r["node"] for r in vol["replicas"] if r["node"] != vol["primary"])
    say(f"h1: nvme connect-all against {other} only (its discovery refers to the others)")
    opts = "--keep-alive-tmo=5 --ctrl-loss-tmo=30"
    lab.sh("h1", f"nvme connect-all -t tcp -a {lab.addr(other)} -s 8009 {opts}", timeout=300)
    dev, states = multipath_device(lab, "h1", vol["nqn"], 3)
    check(sorted(states) == ["inaccessible", "inaccessible", "optimized"],
          f"h1 sees rvol as one device {dev} with 3 paths (one optimized)")  # fmt: skip
    sha = write_random(lab, "h1", dev)
    check(read_sha(lab, "h1", dev) == sha, f"h1 reads back through the multipath device ({sha[:16]}...)")
    for r in vol["replicas"]:
        lv = lab.sh(r["node"], f"lvs --noheadings -o lv_path -S lv_name=v_{vol['vol_id']}").stdout.strip()
        check(read_sha(lab, r["node"], lv, skip_mib=MIRROR_OFFSET_MIB) == sha,
              f"{r['node']}'s replica holds what h1 wrote")  # fmt: skip
    disconnect(lab, "h1", vol["nqn"])
    nodeos._nodeos(lab, "s2", "volume", "delete", "rvol", "--force")


def run_demo(name: str = "demo", *, keep: bool = False, exporter: Exporter | None = None) -> None:
    """Boot s1 (2 drives) + h1, export over TCP and RDMA, verify data from h1 both ways; with
    the daemon (not --by-hand), also s2 and s3: a cluster on racks a/b/c and a 3-replica volume
    the host sees as one device with three paths."""
    replicated = exporter is None
    exporter = exporter or NodeosExporter()
    lab = Lab(name)
    if lab.is_up():
        say(f"lab {name} is up from an earlier run: taking it down first")
        lab.down()
    t0 = time.monotonic()
    if replicated:
        say("building or refreshing the image, then booting s1..s3 (2 NVMe drives each, one cluster) and h1")
        lab.up(storage=3, drives=2, hosts=1, cluster=True)
    else:
        say("building or refreshing the image, then booting s1 (2 NVMe drives) and h1 (GPU node)")
        lab.up(storage=1, drives=2, hosts=1)
    ok = False
    try:
        say(f"lab up in {time.monotonic() - t0:.0f} s: s1 {lab.addr('s1')}, h1 {lab.addr('h1')}")
        serials = lab.serials("s1")
        out = lab.exec("s1", ["nvme", "list", "-o", "json"], check=True).stdout
        check(all(s in out for s in serials), f"s1 sees its drives {', '.join(serials)}")
        state = lab.exec("s1", ["systemctl", "is-active", "nodeosd"]).stdout.strip()
        say(f"s1: nodeosd is {state}")
        hostnqn = lab.spec("h1").hostnqn
        exp = exporter.export(lab, "s1", name="vol1", size_mib=256, hostnqn=hostnqn)

        dev = connect(lab, "h1", exp, "tcp")
        say(f"h1: {exp.nqn} is {dev} over TCP; writing {DEMO_MIB} MiB of random data")
        sha = write_random(lab, "h1", dev)
        check(read_sha(lab, "h1", dev) == sha, f"h1 reads back the same sha256 over TCP ({sha[:16]}...)")
        disconnect(lab, "h1", exp.nqn)

        dev = connect(lab, "h1", exp, "rdma")
        say(f"h1: {exp.nqn} is {dev} over RDMA (Soft-RoCE rxe0)")
        check(read_sha(lab, "h1", dev) == sha, "h1 reads the data written over TCP back over RDMA")
        sha2 = write_random(lab, "h1", dev, seek_mib=DEMO_MIB)
        check(read_sha(lab, "h1", dev, skip_mib=DEMO_MIB) == sha2, "h1 writes and reads back over RDMA")
        disconnect(lab, "h1", exp.nqn)

        check(
            read_sha(lab, "s1", exp.device) == sha
            and read_sha(lab, "s1", exp.device, skip_mib=DEMO_MIB) == sha2,
            f"s1's volume {exp.device} holds exactly what h1 wrote",
        )
        if replicated:
            replicated_part(lab, hostnqn)
        ok = True
        say(
            f"done in {time.monotonic() - t0:.0f} s: the storage VM served a drive-backed volume "
            "over NVMe/TCP and NVMe/RDMA"
            + ("; three storage VMs served a 3-replica volume as one multipath device" if replicated else "")
        )
    finally:
        if keep:
            say(f"lab {name} kept: `nodeos-lab --name {name} status`, `... exec h1 -- nvme list`, `... down`")
        else:
            if not ok:
                kept = lab.collect(lab.failed_dir)
                say(f"consoles kept in {lab.failed_dir} ({len(kept)} files)")
            say("tearing the lab down")
            lab.down()
