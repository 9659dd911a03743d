"""nodeosd start-up inside a lab storage VM: start-to-READY under systemd, where it goes, and boot.

    sudo .venv/bin/python bench/startup_bench.py [--name LAB] [--restarts 3] [--label before|after]

Uses the lab LAB when it is up (its s1), else boots its own (1 storage VM, 1 drive, no host)
and takes it down at the end. For each run: `systemctl restart nodeosd` (Type=notify, so it
returns at READY=1), then start-to-READY = ActiveEnterTimestamp - ExecMainStartTimestamp
(monotonic, from systemd). Two variants in the same boot: the image as built, and the image
with the nodeos package's bytecode removed (what every start paid before bytecode was
compiled at image build: ProtectSystem=full keeps Python from writing it). Also the imports
that dominate (`python3 -X importtime -c 'import nodeos.daemon.main'`, cumulative) and the
VM's boot (`systemd-analyze`, the slowest units). Figures go to docs/benchmarks.md, section
"nodeosd start-up (lab, TCG)", under the given --label (before/after a change).
TCG emulates every guest instruction, on a shared 2-core host: lab figures, not hardware.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "tests" / "tooling"))  # nodeos_devtools, without the dev install too

from benchdoc import BENCHMARKS_MD, add_no_write, read_section, write_section  # noqa: E402  (bench/ is on sys.path when a bench script runs)

from nodeos_devtools.lab import Lab  # noqa: E402

SECTION = "## nodeosd start-up (lab, TCG)"
PKG = "/usr/lib/python3/dist-packages/nodeos"


def restart_s(lab: Lab, vm: str) -> float:
    """One `systemctl restart nodeosd`; seconds from exec of nodeosd to READY=1."""
    lab.sh(vm, "systemctl restart nodeosd.service", timeout=900)
    r = lab.sh(
        vm, "systemctl show -P ExecMainStartTimestampMonotonic -P ActiveEnterTimestampMonotonic nodeosd"
    )
    start, active = (int(x) for x in r.stdout.split())
    return (active - start) / 1e6


def import_times(lab: Lab, vm: str, top: int = 8) -> list[tuple[str, float]]:
    """The nodeos modules and dependencies with the largest cumulative import time (seconds)."""
    r = lab.exec(
        vm, ["python3", "-X", "importtime", "-c", "import nodeos.daemon.main"], timeout=600, check=True
    )
    rows: list[tuple[str, float]] = []
    for line in r.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _self, cum, name = (p.strip() for p in line.removeprefix("import time:").split("|"))
        if cum.isdigit():
            rows.append((name, int(cum) / 1e6))
    # Top-level entries only (no indentation means a module imported directly by the chain root).
    total = next((c for n, c in rows if n == "nodeos.daemon.main"), 0.0)
    tops = sorted(((n, c) for n, c in rows if n != "nodeos.daemon.main"), key=lambda x: -x[1])[:top]
    return [("nodeos.daemon.main (total)", total), *tops]


PROBE = """
import subprocess, time
def t(argv):
    t0 = time.monotonic(); subprocess.run(argv, capture_output=True); return time.monotonic() - t0
print(t(["python3", "-c", "pass"]), t(["python3", "-c", "import pyroute2"]), t(["ip", "-j", "addr", "show"]))
"""


def probes(lab: Lab, vm: str) -> dict[str, float]:
    """What the daemon's start used to pay for its addresses: pyroute2's import vs one `ip` call."""
    r = lab.exec(vm, ["python3", "-c", PROBE], timeout=900, check=True)
    bare, pyroute2, ip = (float(x) for x in r.stdout.split())
    return {"python3 -c pass": bare, "python3 -c 'import pyroute2'": pyroute2, "ip -j addr show": ip}


def boot_figures(lab: Lab, vm: str) -> dict[str, Any]:
    total = lab.sh(vm, "systemd-analyze 2>&1 | head -1 || true").stdout.strip()
    blame = lab.sh(vm, "systemd-analyze blame --no-pager 2>/dev/null | head -8 || true").stdout
    return {"total": total, "blame": [" ".join(ln.split()) for ln in blame.splitlines() if ln.strip()]}


def run(name: str | None, restarts: int) -> dict[str, Any]:
    own = name is None or not Lab(name).is_up()
    lab = Lab(name or "bench-start")
    if own:
        if lab.is_up():
            lab.down()
        lab.up(storage=1, drives=1, hosts=0, drive_size_mib=256)
    try:
        vm = "s1"
        out: dict[str, Any] = {"boot": boot_figures(lab, vm)}
        pyc = lab.sh(vm, f"find {PKG} -name '*.pyc' | wc -l").stdout.strip()
        out["pyc_files"] = int(pyc)
        out["with_image_bytecode"] = [restart_s(lab, vm) for _ in range(restarts)]
        out["imports"] = import_times(lab, vm)
        # As before: no bytecode for the nodeos package, and none can be written at start.
        lab.sh(vm, f"find {PKG} -name __pycache__ -prune -exec rm -rf {{}} +")
        out["without_bytecode"] = [restart_s(lab, vm) for _ in range(restarts)]
        out["imports_without_bytecode"] = import_times(lab, vm)
        out["probes"] = probes(lab, vm)
        out["load"] = os.getloadavg()
        return out
    finally:
        if own:
            lab.down()


def render(label: str, res: dict[str, Any], old: str) -> str:
    def fmt(xs: list[float]) -> str:
        return f"median {statistics.median(xs):.1f} s (runs: {', '.join(f'{x:.1f}' for x in xs)})"

    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"### {label}",
        "",
        f"Measured {when}, host load {res['load'][0]:.1f}; image with {res['pyc_files']} nodeos .pyc files.",
        "",
        "| nodeosd start-to-READY (systemctl restart, exec → READY=1) | seconds |",
        "|---|---|",
        f"| image as built | {fmt(res['with_image_bytecode'])} |",
    ]
    if res["pyc_files"]:
        lines.append(f"| same boot, nodeos bytecode removed (as before) | {fmt(res['without_bytecode'])} |")
    else:  # the image had no bytecode: the second series is the same case again (noise)
        lines.append(f"| same again (image has no nodeos bytecode) | {fmt(res['without_bytecode'])} |")
    lines += [
        "",
        "Largest cumulative imports of `nodeos.daemon.main` (`python3 -X importtime`), with the image's",
        "bytecode / without nodeos bytecode:",
        "",
        "| module | with (s) | without (s) |",
        "|---|---|---|",
    ]
    without = dict(res["imports_without_bytecode"])
    for n, c in res["imports"]:
        lines.append(f"| {n} | {c:.2f} | {without.get(n, float('nan')):.2f} |")
    lines += [
        "",
        f"Boot of the VM: {res['boot']['total']}",
        "",
        "Slowest units (`systemd-analyze blame`):",
        "",
    ]
    lines += [f"    {b}" for b in res["boot"]["blame"]]
    # Keep the other label's subsection (before/after live side by side).
    kept = ""
    for part in old.split("\n### ")[1:]:
        if part.split("\n", 1)[0].strip() != label:
            kept += "\n### " + part.rstrip("\n") + "\n"
    head = [
        SECTION,
        "",
        "`sudo .venv/bin/python bench/startup_bench.py --label before|after` (one storage VM, TCG,",
        "a 2-core host shared with other engineers' labs: compare figures within one run, not across runs).",
        "",
        "",
    ]
    return "\n".join(head) + kept.lstrip("\n") + ("\n" if kept else "") + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default=None, help="Use this lab's s1 if it is up (else boot one).")
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--label", default="after")
    add_no_write(ap)
    a = ap.parse_args()
    res = run(a.name, a.restarts)
    print(json.dumps(res, indent=1))
    if not a.no_write:
        write_section(BENCHMARKS_MD, SECTION, render(a.label, res, read_section(SECTION)))


if __name__ == "__main__":
    main()
