"""What the soak keeps when it finds a data violation (a lost write, a verify error, a failed host
read): the volume as the map has it, the cluster's events, each storage VM's md arrays, nvmet
exports and nodeosd journal, and the GPU node's paths, written to files before the run goes on
(and before the lab is torn down), so the finding can be read without replaying an hour.

    dir = collect(lab, "s2", "h1", "v13", Path(".../step-192"), up=["s1", "s2"])
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nodeos_devtools.lab.lab import Lab

EVIDENCE_ROOT = "soak-evidence"  # beside the labs (labs_root()): a lab's own directory goes at down
LIMIT = 400_000  # bytes kept per file: a journal can be long

STORAGE_SCRIPT = r"""
echo "== /proc/mdstat"; cat /proc/mdstat
for md in /dev/md/*; do [ -e "$md" ] || continue; echo "== mdadm --detail $md"; mdadm --detail "$md"; done
echo "== nvmet subsystems"
for s in /sys/kernel/config/nvmet/subsystems/*; do
  [ -d "$s" ] || continue; echo "-- ${s##*/}"
  for n in "$s"/namespaces/*; do
    [ -d "$n" ] && echo "ns ${n##*/}: $(cat "$n/device_path") on=$(cat "$n/enable") ana=$(cat "$n/ana_grpid")"
  done
  ls "$s/allowed_hosts" 2>/dev/null | sed 's/^/host /'
done
echo "== nvmet ports"
for p in /sys/kernel/config/nvmet/ports/*; do
  [ -d "$p" ] || continue
  echo "-- port ${p##*/} $(cat "$p/addr_traddr"):$(cat "$p/addr_trsvcid")"
  ls "$p/subsystems" | sed 's/^/sub /'
  for g in "$p"/ana_groups/*; do [ -d "$g" ] && echo "ana group ${g##*/}: $(cat "$g/ana/state")"; done
done
echo "== nvme list-subsys"; nvme list-subsys 2>&1
echo "== lvs"; lvs -a -o lv_name,vg_name,lv_size,data_percent,lv_attr 2>&1
"""
# Each LV's copy of the mark (replicated volumes keep their data MIRROR_DATA_OFFSET into the LV;
# a 1-replica volume's LV is the data itself), and each md array's: which leg lacks it.
LEG_SCRIPT = r"""
echo "== the mark's {mib} MiB at {off} MiB, per LV (at +8 MiB: a mirror leg) and per md array"
for lv in $(lvs --noheadings -o vg_name,lv_name -S 'segtype=thin&&lv_active=active' | awk '{{print $1"/"$2}}')
do
  for skip in {off} $(({off} + 8)); do
    echo "$lv @$skip: $(dd if=/dev/$lv bs=1M skip=$skip count={mib} iflag=direct status=none | sha256sum)"
  done
done
for md in /dev/md/*; do [ -e "$md" ] || continue
  echo "$md @{off}: $(dd if=$md bs=1M skip={off} count={mib} iflag=direct status=none | sha256sum)"
done
"""
HOST_SCRIPT = "nvme list-subsys 2>&1; echo '== dmesg'; dmesg | tail -n 150"


def evidence_dir(lab: Lab, started: float, step: int) -> Path:
    return lab.root / EVIDENCE_ROOT / f"{lab.name}-{int(started)}" / f"step-{step}"


def collect(
    lab: Lab,
    via: str,
    host: str,
    volume: str,
    dest: Path,
    up: Sequence[str],
    mark: tuple[int, int] | None = None,
) -> Path:
    """Write what the cluster and the VMs show about `volume` into `dest` (best effort: a VM that
    does not answer gets a file saying why). `via` is a storage VM whose console answers; `mark`
    (offset MiB, MiB): where the volume's mark lives, read from every leg."""
    dest.mkdir(parents=True, exist_ok=True)
    _save(lab, dest / "volume.json", via, ["nodeos", "volume", "show", volume, "--json"])
    _save(lab, dest / "events.json", via, ["nodeos", "events", "--json"])
    _save(lab, dest / "status.txt", via, ["nodeos", "status"])
    for vm in up:
        script = STORAGE_SCRIPT + (LEG_SCRIPT.format(off=mark[0], mib=mark[1]) if mark else "")
        _save(lab, dest / f"{vm}-dataplane.txt", vm, ["sh", "-c", script])
        journal = ["journalctl", "-u", "nodeosd", "-n", "3000", "--no-pager"]
        _save(lab, dest / f"{vm}-journal.txt", vm, journal)
    _save(lab, dest / f"{host}-paths.txt", host, ["sh", "-c", HOST_SCRIPT])
    return dest


def _save(lab: Lab, path: Path, vm: str, argv: list[str]) -> None:
    try:
        r = lab.exec(vm, argv, 120)
        text = r.stdout + (f"\n== stderr (rc {r.rc})\n{r.stderr}" if r.rc or r.stderr else "")
    except Exception as e:  # evidence is best effort: the violation is recorded either way
        text = f"{vm}: {argv!r} failed: {type(e).__name__}: {e}"
    path.write_text(text[-LIMIT:])
