"""What a lab's nodes hold that nobody asked for: the check both the shared lab tests
(tests/lab/shared_labs.py) and the soak (tests/tooling/nodeos_devtools/lab/soak.py) make once everything they
made
was deleted.

On each storage VM, in one round trip: nodeosd active, no pool, volume or host in its records,
no LV, no nvmet subsystem or port (but the discovery anchor and the discovery ports only it
holds: a member's standing discovery service, nodeos/dataplane/kernel/nvmet.py); with `deep`:
no md array, no NVMe controller other than the VM's own drives (a remote leg or a published
copy's source still attached), no pending intent and no data plane call stuck past its
deadline. On each GPU node: no NVMe controller.
"""

from __future__ import annotations

import json
from typing import Any

from nodeos.dataplane.kernel.nvmet import ANCHOR_NQN
from nodeos_devtools.lab.lab import Lab

STORAGE_SCRIPT = """
systemctl is-active nodeosd.service || true
echo @@
nodeos pool list --json 2>/dev/null || true
echo @@
nodeos volume list --json 2>/dev/null || true
echo @@
nodeos host list --json 2>/dev/null || true
echo @@
lvs --noheadings -o vg_name,lv_name 2>/dev/null || true
echo @@
cd /sys/kernel/config/nvmet 2>/dev/null && {
  for s in subsystems/*; do [ -e "$s" ] && [ "${s#*/}" != {anchor} ] && echo "$s"; done
  for p in ports/*; do [ -e "$p" ] && [ "$(ls "$p/subsystems")" != {anchor} ] && echo "$p"; done
} || true
""".replace("{anchor}", ANCHOR_NQN)

# Appended with deep=True: md arrays, fabric controllers (transport not pcie), nodeosd's status.
DEEP_SCRIPT = """
echo @@
grep -o '^md[0-9]*' /proc/mdstat 2>/dev/null || true
echo @@
for c in /sys/class/nvme/nvme*; do [ -e "$c" ] || continue
  t=$(cat $c/transport 2>/dev/null); [ "$t" = pcie ] || echo "${c##*/}:$t:$(cat $c/subsysnqn 2>/dev/null)"
done
echo @@
nodeos status --json 2>/dev/null || true
"""


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text.strip()


def _find(doc: Any, key: str) -> list[Any]:
    """Every value under `key` anywhere in a JSON document (the status nests per service)."""
    out: list[Any] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.extend([v] if k == key else _find(v, key))
    elif isinstance(doc, list):
        for v in doc:
            out.extend(_find(v, key))
    return out


def storage_leftovers(lab: Lab, vm: str, *, deep: bool = False) -> list[str]:
    """What storage VM `vm` still holds (empty: clean)."""
    script = STORAGE_SCRIPT + (DEEP_SCRIPT if deep else "")
    r = lab.sh(vm, script, timeout=600, check=False)
    parts = r.stdout.split("@@\n")
    if len(parts) != (9 if deep else 6):
        return [f"{vm}: cleanliness check failed: {r.stdout[-300:]} {r.stderr[-300:]}"]
    active, pools, vols, hosts, lvs, nvmet = parts[:6]
    found = []
    if active.strip() != "active":
        found.append(f"{vm}: nodeosd is {active.strip()}")
    for what, text in (("pools", pools), ("volumes", vols), ("hosts", hosts)):
        if _json(text) != []:
            found.append(f"{vm}: nodeosd still has {what}: {str(_json(text))[:200]}")
    if lvs.strip():
        found.append(f"{vm}: LVs left: {' '.join(lvs.split())[:200]}")
    if nvmet.split():
        found.append(f"{vm}: nvmet objects left: {' '.join(nvmet.split())[:200]}")
    if deep:
        md, ctrls, status = parts[6:]
        if md.split():
            found.append(f"{vm}: md arrays left: {' '.join(md.split())}")
        if ctrls.split():
            found.append(f"{vm}: remote NVMe controllers left: {' '.join(ctrls.split())[:300]}")
        doc = _json(status)
        if not isinstance(doc, dict):
            found.append(f"{vm}: nodeos status did not answer: {str(doc)[:200]}")
        else:
            pending = [p for v in _find(doc, "pending_intents") for p in (v or [])]
            if pending:
                found.append(f"{vm}: pending intents: {str(pending)[:300]}")
            stuck = [s for v in _find(doc, "stuck_calls") for s in (v or [])]
            if stuck:
                found.append(f"{vm}: data plane calls stuck: {str(stuck)[:300]}")
    return found


def host_leftovers(lab: Lab, vm: str) -> list[str]:
    ctrls = lab.sh(vm, "ls /sys/class/nvme 2>/dev/null || true").stdout.split()
    return [f"{vm}: NVMe controllers still connected: {' '.join(ctrls)}"] if ctrls else []


def leftovers(lab: Lab, *, deep: bool = False) -> list[str]:
    """Every leftover on every VM of the lab (empty: clean); VMs not running are named first."""
    found = [
        f"{v['name']} is {v['state']}" + (f": {v['crash']}" if v.get("crash") else "")
        for v in lab.status()["vms"]
        if v["state"] != "running"
    ]
    if found:
        return found
    for vm in lab.storage_vms:
        found.extend(storage_leftovers(lab, vm, deep=deep))
    for vm in lab.host_vms:
        found.extend(host_leftovers(lab, vm))
    return found
