"""The soak's GPU node: connect a volume on every path, fio with verify in the background, marks
(random data written with O_DIRECT and fsync, its sha256 kept, read back later), disconnect.

fio writes the first half of a volume as created (`--size`), a mark the 4 MiB after it, so both
can live on one volume; neither touches space a resize added.
"""

from __future__ import annotations

import json
import shlex
import time
from typing import Any

from nodeos_devtools.lab import fio
from nodeos_devtools.lab.lab import Lab
from nodeos_devtools.lab.qga import ExecResult

# The host's side of a fast failover (docs/operations.md, "Failover: host settings").
CONNECT_OPTS = ["--keep-alive-tmo=5", "--ctrl-loss-tmo=60", "--reconnect-delay=2"]
# --thread: jobs as threads (a forked job killed by SIGPIPE at its end made fio abort, once).
FIO_FLAGS = (
    "--rw=randwrite --bs=4k --direct=1 --ioengine=libaio --thread --iodepth=4 --time_based --verify=crc32c "
    "--do_verify=1 --verify_fatal=1 --verify_backlog=64 --output-format=json"
)


# nvme-cli's udev rule runs `nvme connect-all --device=<ctrl>` on every discovery-log-change
# notice a discovery controller gets. With the soak's host discovering every 15 s (soak_paths.py)
# while volumes come and go, the short-lived discovery controllers caught notices, each
# connect-all followed the referrals to every node and left discovery controllers of its own
# that caught the next ones: 464 controllers, 202 connect-alls, load 100 on the GPU node
# (2026-11-30, seed 8). It also connects every granted volume, which the soak's revoke check
# must not see. The soak's host keeps its paths itself, so the rule is masked there.
AUTOCONNECT_OFF = (
    "mkdir -p /etc/udev/rules.d && ln -sf /dev/null /etc/udev/rules.d/70-nvmf-autoconnect.rules "
    "&& udevadm control --reload"
)


def host_setup(lab: Lab, host: str) -> None:
    """The soak's GPU node before its first connect: nvme-cli's autoconnect rule masked."""
    lab.sh(host, AUTOCONNECT_OFF, timeout=120)


def _tag(name: str) -> str:
    return f"/root/soak-{name}"


def _discover(lab: Lab, host: str, addr: str) -> list[dict[str, Any]]:
    r = lab.exec(host, ["nvme", "discover", "-t", "tcp", "-a", addr, "-s", "8009", "-o", "json"], 120)
    if r.rc != 0:
        return []
    try:
        return list(json.loads(r.stdout).get("records", []))
    except ValueError:
        return []


def paths(lab: Lab, host: str, nqn: str, via_addrs: list[str]) -> list[tuple[str, str]]:
    """(address, port) of every TCP path to `nqn` that discovery at `via_addrs` (a host's
    discovery.conf naming every storage node) and the discovery controllers they refer to list:
    what `nvme connect-all` finds (a node lists only what it exports; the others come by its
    referrals; a node that is down, or one of a release before the discovery anchor that exports
    nothing, answers no discovery at all)."""
    found: set[tuple[str, str]] = set()
    asked: set[str] = set()
    todo = list(reversed(via_addrs))
    while todo:
        addr = todo.pop()
        if addr in asked:
            continue
        asked.add(addr)
        for e in _discover(lab, host, addr):
            if e.get("trtype") != "tcp":
                continue
            if e.get("subnqn") == nqn:
                found.add((e["traddr"], e["trsvcid"]))
            elif "referral" in str(e.get("subtype")):
                todo.append(e["traddr"])
    return sorted(found)


def connect(lab: Lab, host: str, nqn: str, via_addrs: list[str], timeout: float = 180) -> str:
    """Connect every path of `nqn` (only it: a connect-all would take every granted volume, and a
    revoke must find the host gone) and return the multipath head's device."""
    found = paths(lab, host, nqn, via_addrs)
    if not found:
        raise RuntimeError(f"discovery at {', '.join(via_addrs)} lists no TCP path to {nqn}")
    for addr, port in found:
        # A path already connected answers "already connected": not a failure.
        connect_path(lab, host, nqn, addr, port)
    return device(lab, host, nqn, timeout)


def connect_path(lab: Lab, host: str, nqn: str, addr: str, port: str) -> ExecResult:
    return lab.exec(
        host, ["nvme", "connect", "-t", "tcp", "-a", addr, "-s", port, "-n", nqn, *CONNECT_OPTS], 120
    )


def connected_paths(lab: Lab, host: str, nqn: str) -> set[tuple[str, str]]:
    """(address, port) of every controller the host holds for `nqn`, live or reconnecting."""
    r = lab.sh(host, connected_script(nqn), check=False)
    return {p for line in r.stdout.splitlines() if (p := parse_address(line))}


def connected_script(nqn: str, root: str = "") -> str:
    """The shell that prints the sysfs `address` of each controller of `nqn` (`root` as in
    device_script). A subsystem's entries are its controllers and its heads; a head has no
    `address`."""
    q = shlex.quote
    return (
        f"for s in {q(root)}/sys/class/nvme-subsystem/nvme-subsys*; do "
        f'[ "$(cat "$s/subsysnqn" 2>/dev/null)" = {q(nqn)} ] || continue; '
        'for c in "$s"/nvme[0-9]*; do [ -e "$c/address" ] && cat "$c/address"; done; done; true'
    )


def parse_address(line: str) -> tuple[str, str] | None:
    """A controller's sysfs `address` ("traddr=10.0.0.1,trsvcid=4420,src_addr=...") as (traddr, trsvcid)."""
    fields = dict(kv.split("=", 1) for kv in line.strip().split(",") if "=" in kv)
    if "traddr" not in fields or "trsvcid" not in fields:
        return None
    return fields["traddr"], fields["trsvcid"]


def device_script(nqn: str, root: str = "") -> str:
    """The shell that prints the multipath head of `nqn` (`root`: where /sys and /dev are, for
    the unit test). Only a head that is there: with the subsystem connected but its namespace
    not yet scanned, `nvme*n*` matches nothing and an unguarded loop ran with the pattern
    itself, which `[ -b /dev/$b ]` and `echo /dev/$b` then expanded to whatever head was there:
    another volume's, the one fio ran on. The marks of two 60-minute soaks went there (and read
    back as zeros where they belonged). Its /dev node must also be the kernel's device of that
    name (a node udev has not yet replaced after a disconnect would be another device)."""
    q = shlex.quote
    return f"""
udevadm settle -t 30 2>/dev/null || true
for s in {q(root)}/sys/class/nvme-subsystem/nvme-subsys*; do
  [ "$(cat "$s/subsysnqn" 2>/dev/null)" = {q(nqn)} ] || continue
  for n in "$s"/nvme*n*; do
    [ -e "$n" ] || continue
    b=${{n##*/}}
    d={q(root)}/dev/"$b"
    [ -b "$d" ] && [ "$(cat {q(root)}/sys/block/"$b"/dev 2>/dev/null)" = "$(stat -c '%Hr:%Lr' "$d")" ] \
      && echo "$d" && exit 0
  done
done
exit 1"""


def device(lab: Lab, host: str, nqn: str, timeout: float) -> str:
    """The multipath head of `nqn` once the host has it (device_script)."""
    script = device_script(nqn)
    deadline = time.monotonic() + timeout
    while True:
        r = lab.sh(host, script, check=False)
        if r.rc == 0 and r.stdout.strip():
            return r.stdout.split()[0]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{host}: no block device for {nqn} after {timeout:.0f} s")
        time.sleep(2)


def disconnect(lab: Lab, host: str, nqn: str) -> None:
    lab.exec(host, ["nvme", "disconnect", "-n", nqn], 120)


def fio_start(lab: Lab, host: str, name: str, dev: str, size_mib: int, runtime_s: int) -> None:
    """fio random writes with crc32c verify on the first half of the volume, in the background;
    its pid in <tag>.pid, its JSON report in <tag>.json."""
    t = _tag(name)
    fio = f"fio --name=soak-{name} --filename={dev} --size={size_mib // 2}M --runtime={runtime_s} {FIO_FLAGS}"
    lab.sh(
        host,
        f"rm -f {t}.json {t}.pid; setsid -f sh -c 'echo $$ > {t}.pid; exec {fio} --output={t}.json' "
        "</dev/null >/dev/null 2>&1; "
        f"for i in $(seq 60); do [ -s {t}.pid ] && break; sleep 1; done; kill -0 $(cat {t}.pid)",
        timeout=120,
    )


def fio_wait(lab: Lab, host: str, name: str, timeout: float) -> dict[str, Any]:
    """Wait for the job to end and return its report's job ({"error": ..., ...}); a job that left
    no report (killed, crashed) answers {"error": "no report", ...}."""
    t = _tag(name)
    lab.sh(host, f"while kill -0 $(cat {t}.pid) 2>/dev/null; do sleep 2; done", timeout=timeout)
    out = lab.sh(host, f"cat {t}.json 2>/dev/null || true").stdout
    try:
        return fio.report_job(out)
    except ValueError:
        return {"error": "no report", "output": out[-500:]}


def fio_kill(lab: Lab, host: str, name: str) -> None:
    lab.sh(host, f"kill $(cat {_tag(name)}.pid) 2>/dev/null || true", check=False)


def write_mark(lab: Lab, host: str, dev: str, offset_mib: int, mib: int) -> str:
    """Random data at offset_mib, O_DIRECT and fsync'd (acknowledged by the volume); its sha256."""
    r = lab.sh(
        host,
        f"head -c {mib}M /dev/urandom > /tmp/mark && "
        f"dd if=/tmp/mark of={dev} bs=1M seek={offset_mib} oflag=direct conv=fsync status=none && "
        "sha256sum < /tmp/mark | cut -d' ' -f1",
        timeout=300,
    )
    return r.stdout.strip()


# What sha256sum says of no bytes at all: the read failed (the pipe's status is cut's).
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


class ReadFailed(RuntimeError):
    """The host's read of a mark returned no data: an I/O error, not other data."""


def read_mark(lab: Lab, host: str, dev: str, offset_mib: int, mib: int) -> str:
    r = lab.sh(
        host,
        f"dd if={dev} bs=1M skip={offset_mib} count={mib} iflag=direct status=none"
        " | sha256sum | cut -d' ' -f1",
        timeout=300,
    )
    got = r.stdout.strip()
    if got == EMPTY_SHA256:
        raise ReadFailed(f"reading {dev} gave no data: {(r.stderr or '').strip()[-300:] or 'no error text'}")
    return got
