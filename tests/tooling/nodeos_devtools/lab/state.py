"""A lab's state on disk: the directory per lab name, its state.json, the lock that serialises
changes, and the queries that only read it (VM names, addresses, drives, status)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nodeos.errors import NotFound, OperationFailed
from nodeos_devtools.lab import console_scan, netns, qemu
from nodeos_devtools.lab.console_scan import KernelTrouble
from nodeos_devtools.lab.plan import SUBNETS, check_name, cluster_summary, subnet_of
from nodeos_devtools.lab.qemu import VmSpec
from nodeos_devtools.lab.qga import AgentUnavailable, GuestAgent

Progress = Callable[[str], None]


def _default_progress(msg: str) -> None:
    print(f"lab: {msg}", file=sys.stderr, flush=True)


def labs_root() -> Path:
    env = os.environ.get("NODEOS_LAB_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/nodeos-lab")
    return Path.home() / ".local" / "state" / "nodeos-lab"


class LabState:
    """One named lab's state. Cheap to construct; every method reads the state from disk."""

    def __init__(self, name: str = "default", *, root: Path | None = None, progress: Progress | None = None):
        self.name = check_name(name)
        self.root = Path(root) if root else labs_root()
        self.dir = self.root / self.name
        self.state_file = self.dir / "state.json"
        self.ns = netns.netns_name(self.name)
        self.progress = progress or _default_progress

    # ---- state -------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f".{self.name}.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def _load(self) -> dict[str, Any]:
        try:
            st = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            raise NotFound(f"lab {self.name!r} is not up", field="name", allowed=self.all_names()) from None
        st["vms"] = {n: VmSpec(**v) for n, v in st["vms"].items()}
        return st

    def _save(self, st: dict[str, Any]) -> None:
        out = dict(st)
        out["vms"] = {n: asdict(v) for n, v in st["vms"].items()}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1))
        os.replace(tmp, self.state_file)

    def all_names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "state.json").exists())

    def is_up(self) -> bool:
        return self.state_file.exists()

    def stopped_vms(self) -> list[str]:
        """The lab's VMs whose QEMU is gone (powered off by `kill`, or killed from outside)."""
        st = self._load()
        return [n for n, v in st["vms"].items() if not qemu.is_ours(v.pid, self._tag(n))]

    def is_abandoned(self) -> bool:
        """State left with no VM running: its QEMUs were killed (a run stopped from outside), so
        nothing of it can be used; `up` takes it down instead of refusing the name."""
        if not self.is_up():
            return False
        vms = self._load()["vms"]
        return bool(vms) and not any(qemu.is_ours(v.pid, self._tag(n)) for n, v in vms.items())

    def _vm(self, st: dict[str, Any], vm: str) -> VmSpec:
        if vm not in st["vms"]:
            raise NotFound(f"no VM {vm!r} in lab {self.name!r}", field="vm", allowed=sorted(st["vms"]))
        return st["vms"][vm]

    @property
    def failed_dir(self) -> Path:
        """Where the consoles of a failed `up` are kept (the lab itself is removed)."""
        return self.root / "failed" / self.name

    def vm_dir(self, vm: str) -> Path:
        return self.dir / "vms" / vm

    def _tag(self, vm: str) -> str:
        return f"nodeos-lab-{self.name}-{vm}"

    def _agent(self, vm: str) -> GuestAgent:
        return GuestAgent(self.vm_dir(vm) / "qga.sock")

    @contextmanager
    def _global_lock(self) -> Iterator[None]:
        with open(self.root / ".subnets.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def _pick_subnet(self) -> int:
        used = set()
        for other in self.all_names():
            with suppress(OSError, ValueError, KeyError):
                used.add(json.loads((self.root / other / "state.json").read_text())["subnet"])
        start = int(hashlib.sha256(self.name.encode()).hexdigest(), 16) % SUBNETS
        if self.name == "default":
            start = 0
        for i in range(SUBNETS):
            cand = (start + i) % SUBNETS
            if cand not in used:
                return cand
        raise OperationFailed("all 512 lab subnets of 198.18.0.0/15 are in use")

    # ---- public queries ----------------------------------------------------------------
    @property
    def vms(self) -> list[str]:
        return list(self._load()["vms"])

    @property
    def storage_vms(self) -> list[str]:
        return [n for n, v in self._load()["vms"].items() if v.role == "storage"]

    @property
    def host_vms(self) -> list[str]:
        return [n for n, v in self._load()["vms"].items() if v.role == "host"]

    def addr(self, vm: str) -> str:
        """The VM's IPv4 address on the lab network."""
        return self._vm(self._load(), vm).addr

    def spec(self, vm: str) -> VmSpec:
        return self._vm(self._load(), vm)

    def serials(self, vm: str) -> list[str]:
        return [d["serial"] for d in self._vm(self._load(), vm).drives]

    def console_path(self, vm: str) -> Path:
        self._vm(self._load(), vm)
        return self.vm_dir(vm) / "console.log"

    def status(self) -> dict[str, Any]:
        st = self._load()
        rows = []
        for n, v in st["vms"].items():
            running = qemu.is_ours(v.pid, self._tag(n))
            state = "running" if running else "stopped"
            if running and v.cut:
                state = "cut"
            # QEMU runs on after its guest's kernel died: "running" would hide a dead VM.
            trouble = self.kernel_trouble(n) if running else None
            crash = trouble.describe() if trouble is not None and trouble.fatal else None
            if crash:
                state = "crashed"
            rows.append(
                {
                    "name": n,
                    "role": v.role,
                    "address": v.addr,
                    "state": state,
                    "pid": v.pid if running else None,
                    "hostnqn": v.hostnqn,
                    "drives": [d["serial"] for d in v.drives],
                    "unplugged": list(v.unplugged),
                    **({"crash": crash, "console": str(self.vm_dir(n) / "console.log")} if crash else {}),
                }
            )
        out = {
            "lab": self.name,
            "netns": self.ns,
            "subnet": f"{subnet_of(st['subnet'])}.0/24",
            "accel": st["accel"],
            "image": st["image"],
            "vms": rows,
        }
        if st.get("cluster"):
            out["cluster"] = self._cluster_view(st, rows)
        return out

    def _cluster_view(self, st: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The cluster as the first running storage VM sees it (leader, members), and the labels."""
        from nodeos_devtools.lab import cluster as cluster_mod

        view: dict[str, Any] = {"labels": st["cluster"].get("labels", {})}
        running = [r["name"] for r in rows if r["role"] == "storage" and r["state"] == "running"]
        if not running:
            return {**view, "error": "no storage VM is running"}
        try:
            return {
                **view,
                "seen_from": running[0],
                **cluster_summary(cluster_mod.cluster_status(self, running[0])),
            }
        except (OperationFailed, AgentUnavailable) as e:
            return {**view, "seen_from": running[0], "error": str(e)}

    def kernel_trouble(self, vm: str, since: int | None = None) -> KernelTrouble | None:
        """The kernel failure reports (oops, panic, BUG, WARNING, hung task) in VM's console
        from byte offset `since` (default: its latest boot), or None."""
        try:
            with open(self.vm_dir(vm) / "console.log", "rb") as f:
                if since is not None:
                    f.seek(since)
                data = f.read()
        except OSError:
            return None
        text = data.decode(errors="replace")
        return console_scan.kernel_trouble(vm, text, console_scan.boot_offset(text) if since is None else 0)

    def _console_size(self, vm: str) -> int:
        try:
            return (self.vm_dir(vm) / "console.log").stat().st_size
        except OSError:
            return 0

    def logs(self, vm: str) -> str:
        """The VM's serial console so far (kernel and systemd messages)."""
        p = self.console_path(vm)
        return p.read_text(errors="replace") if p.exists() else ""
