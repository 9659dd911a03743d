"""The soak's runner (tests/tooling/nodeos_devtools/lab/soak.py) and report over a fake lab, no VMs: the
console of a
made-up cluster that does what it is asked at once, a GPU node whose fio and reads say what the
test wants. It shows the shell takes every kind of action and fault, counts them, turns a fio
error, a lost mark, a command past its bound, a volume that stays sick and a leftover into
violations naming the step, and hands back every fault healed."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nodeos_devtools.lab import soak as soak_mod
from nodeos_devtools.lab import soak_end, soak_io
from nodeos_devtools.lab.console_scan import GuestKernelCrashed, KernelReport, KernelTrouble
from nodeos_devtools.lab.qga import ExecResult
from nodeos_devtools.lab.soak import Soak
from nodeos_devtools.lab.soak_report import Report


@dataclass
class Spec:
    hostnqn: str
    drives: list[dict[str, Any]]
    unplugged: list[str] = field(default_factory=list)


def _res(rc: int, out: str = "", err: str = "") -> ExecResult:
    return ExecResult(rc, out.encode(), err.encode())


class FakeLab:
    """A cluster of s1..s3 and h1 that answers the soak's console commands and scripts."""

    def __init__(
        self, tmp: Path, *, fio_error: int = 0, lose_marks: bool = False, read_fails: bool = False
    ) -> None:
        self.name = "fake"
        self.root = tmp / "labs"
        self.storage_vms = ["s1", "s2", "s3"]
        self.host_vms = ["h1"]
        self.specs: dict[str, Spec] = {}
        for vm in self.storage_vms + self.host_vms:
            drives = []
            if vm.startswith("s"):
                p = tmp / f"{vm}.img"
                with open(p, "wb") as f:
                    f.truncate(512 * 1024 * 1024)
                drives = [{"path": str(p), "serial": f"NODEOS-{vm}-0"}]
            self.specs[vm] = Spec(f"nqn.2014-08.org.nvmexpress:uuid:{vm}", drives)
        self.objects: dict[str, dict[str, Any]] = {}
        self.pools: set[str] = set()
        self.hosts: set[str] = set()
        self.off: set[str] = set()
        self.cut_off: set[str] = set()
        self.fio_error, self.lose_marks, self.read_fails = fio_error, lose_marks, read_fails
        self.marks: dict[str, str] = {}
        self.sick: set[str] = set()  # names whose health stays short
        self.calls: list[tuple[str, str]] = []
        self.connected = ""  # the NQN h1 connected last (one at a time in the soak)

    # ---- the lab's API the soak uses -------------------------------------------------
    def spec(self, vm: str) -> Spec:
        return self.specs[vm]

    def serials(self, vm: str) -> list[str]:
        return [d["serial"] for d in self.specs[vm].drives]

    def addr(self, vm: str) -> str:
        return f"198.18.0.{11 + self.storage_vms.index(vm)}"

    def status(self) -> dict[str, Any]:
        vms = [{"name": vm, "state": "stopped" if vm in self.off else "running"} for vm in self.specs]
        return {"vms": vms, "cluster": {}}

    def is_up(self) -> bool:
        return True

    def kill(self, vm: str) -> None:
        self.off.add(vm)

    def start(self, vm: str) -> None:
        self.off.discard(vm)
        self.specs[vm].unplugged = []

    def cut(self, vm: str) -> None:
        self.cut_off.add(vm)

    def heal(self, vm: str) -> None:
        self.cut_off.discard(vm)

    def unplug(self, vm: str, serial: str) -> None:
        self.specs[vm].unplugged.append(serial)

    def plug(self, vm: str, serial: str) -> None:
        self.specs[vm].unplugged.remove(serial)

    def sh(self, vm: str, script: str, timeout: float = 120.0, *, check: bool = True) -> ExecResult:
        return self.exec(vm, ["sh", "-ec", script], timeout)

    def exec(self, vm: str, argv: list[str], timeout: float = 120.0, input: Any = None) -> ExecResult:
        assert vm not in self.off, f"a command in {vm}, which is powered off: {argv}"
        self.calls.append((vm, " ".join(argv)))
        if argv[0] == "nodeos":
            return self._console(vm, argv[1:-1])
        if argv[0] == "nvme":
            return self._nvme(argv)
        return self._script(vm, argv[-1])

    # ---- the made-up cluster ---------------------------------------------------------
    def _err(self, code: str, rc: int = 2) -> ExecResult:
        return _res(rc, json.dumps({"error": {"code": code, "message": code}}))

    def _row(self, name: str) -> dict[str, Any]:
        o = self.objects[name]
        n = o["replicas"]
        good = n - 1 if name in self.sick else n
        return {"name": name, **o, "health": "-" if o["kind"] == "snapshot" else f"{good}/{n}"}

    def _console(self, vm: str, args: list[str]) -> ExecResult:
        head, rest = args[:2], args[2:]
        opts = dict(zip(rest[1::2], rest[2::2], strict=False))
        if args[0] == "status":
            return _res(0, "{}")
        if head == ["pool", "create"]:
            self.pools.add(vm)
            return _res(0, "{}")
        if head == ["pool", "delete"]:
            self.pools.discard(vm)
            return _res(0, "{}")
        if head == ["host", "add"]:
            self.hosts.add(rest[0])
            return _res(0, "{}")
        if head == ["host", "remove"]:
            self.hosts.discard(rest[0])
            return _res(0, "{}")
        if args[0] == "node":
            return _res(0, "{}")
        verb = args[1]
        if verb == "list":
            return _res(0, json.dumps([self._row(n) for n in sorted(self.objects)]))
        name = rest[0]
        made = {
            "create": rest[0],
            "snapshot": rest[1] if len(rest) > 1 else "",
            "clone": rest[1] if len(rest) > 1 else "",
        }
        made["publish"] = made["clone"]
        if verb in made:
            new = made[verb]
            if new in self.objects:
                return self._err("already_exists")
            src = self.objects.get(name, {}) if verb != "create" else {}
            kind = {"create": "volume", "snapshot": "snapshot", "clone": "clone", "publish": "published"}[
                verb
            ]
            size = (
                int(opts.get("--size", "0MiB")[:-3] or 0) * 2**20
                if verb == "create"
                else src.get("size_bytes")
            )
            replicas = int(opts.get("--replicas", src.get("replicas", 1)))
            self.objects[new] = {
                "kind": kind, "state": "ready", "nqn": f"nqn.2014-08.io.nodeos:vol:{new}",
                "size_bytes": size, "replicas": replicas, "hosts": [],
            }  # fmt: skip
            return _res(0, json.dumps(self._row(new)))
        if name not in self.objects:
            return self._err("not_found")
        if verb == "show":
            return _res(0, json.dumps(self._row(name)))
        if verb in ("delete", "unpublish"):
            del self.objects[name]
            return _res(0, json.dumps({"name": name}))
        if verb == "resize":
            self.objects[name]["size_bytes"] = int(opts["--size"][:-3]) * 2**20
        return _res(0, json.dumps(self._row(name)))

    def _nvme(self, argv: list[str]) -> ExecResult:
        if argv[1] == "discover":
            recs = [
                {"subnqn": o["nqn"], "trtype": "tcp", "traddr": "198.18.0.11", "trsvcid": "4420"}
                for o in self.objects.values()
            ]
            return _res(0, json.dumps({"records": recs}))
        if argv[1] == "connect":
            self.connected = argv[argv.index("-n") + 1]
        return _res(0)

    def _script(self, vm: str, script: str) -> ExecResult:
        if "lvs --noheadings" in script:  # the leftover check: clean
            parts = ["active", "[]", "[]", "[]", "", "", "", "", "{}"]
            return _res(0, "\n@@\n".join(parts) + "\n")
        if "nvme-subsystem" in script:
            return _res(0, "/dev/nvme0n1\n")
        if "cat /root/soak-" in script:
            return _res(0, json.dumps({"jobs": [{"error": self.fio_error}]}))
        if "/tmp/mark" in script:
            m = re.search(r"seek=(\d+)", script)
            sha = f"sha-{len(self.marks)}"
            self.marks[f"{self.connected}@{m.group(1) if m else ''}"] = sha
            return _res(0, sha + "\n")
        if "sha256sum" in script:
            m = re.search(r"skip=(\d+)", script)
            got = self.marks.get(f"{self.connected}@{m.group(1) if m else ''}", "none")
            if self.read_fails:  # dd failed: sha256sum of nothing, the pipe's status cut's
                return _res(
                    0, soak_io.EMPTY_SHA256 + "\n", "dd: error reading '/dev/nvme0n1': Input/output error"
                )
            return _res(0, "lost\n" if self.lose_marks else got + "\n")
        if "ls /sys/class/nvme" in script:
            return _res(0, "")
        return _res(0)


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(soak_mod.time, "sleep", lambda s: None)
    monkeypatch.setattr(soak_end.time, "sleep", lambda s: None)


def _soak(lab: FakeLab, seed: int = 5, steps: int = 80, **kw: Any) -> Report:
    s = Soak(lab, seed, minutes=60, steps=steps, log=lambda m: None, **kw)  # type: ignore[arg-type]
    return s.run()


def test_a_clean_run_takes_every_kind_of_action_and_ends_clean(tmp_path: Path) -> None:
    lab = FakeLab(tmp_path)
    kinds: set[str] = set()
    for seed in range(3):
        r = _soak(lab, seed)
        assert r.ok, r.render()
        kinds |= set(r.counts)
        assert r.steps >= 80 and r.last_step >= 80
        assert not lab.off and not lab.cut_off and not lab.objects and not lab.pools and not lab.hosts
        assert not any(s.unplugged for s in lab.specs.values())
    assert {"create", "grant", "fio_start", "fio_check", "write", "readback", "snapshot"} <= kinds
    assert {"power", "power_on", "cut", "heal", "kill", "daemon_back", "drive", "plug"} <= kinds
    doc = r.to_json()
    json.dumps(doc)
    assert doc["ok"] and doc["violations"] == [] and doc["counts"]["create"]["ok"] >= 1


def test_the_host_masks_nvme_clis_autoconnect_before_its_first_connect(tmp_path: Path) -> None:
    """The rule's connect-alls followed every discovery-log change into a controller storm on the
    soak's host (soak_io.AUTOCONNECT_OFF), and connect every granted volume behind its back."""
    lab = FakeLab(tmp_path)
    assert _soak(lab, seed=1, steps=30).ok
    h1 = [c for vm, c in lab.calls if vm == "h1"]
    masked = next(i for i, c in enumerate(h1) if "70-nvmf-autoconnect.rules" in c and "/dev/null" in c)
    assert masked < next(i for i, c in enumerate(h1) if c.startswith("nvme connect"))


def test_a_fio_error_is_a_violation_naming_its_step_and_the_replay(tmp_path: Path) -> None:
    r = _soak(FakeLab(tmp_path, fio_error=84), seed=2)
    assert not r.ok
    v = next(v for v in r.violations if "fio on" in v.what)
    assert "error 84" in v.what and v.step > 0 and v.action.startswith(f"step {v.step}: fio_check")
    assert f"--seed 2 --steps {r.violations[0].step} " in r.replay()
    assert "VIOLATION" in r.render() and "replay: nodeos-lab soak --seed 2" in r.render()


def test_a_mark_read_back_different_is_an_acknowledged_write_lost(tmp_path: Path) -> None:
    lab = FakeLab(tmp_path, lose_marks=True)
    r = _soak(lab, seed=1)
    lost = [v for v in r.violations if "acknowledged write lost" in v.what]
    assert lost, r.render()
    # What the cluster and the VMs showed is kept, taken while the host still held its paths.
    kept = Path(re.search(r"\(evidence: ([^)]+)\)", lost[0].what).group(1))  # type: ignore[union-attr]
    assert kept.parent.parent == lab.root / "soak-evidence" and kept.name == f"step-{lost[0].step}"
    name = lost[0].action.split()[-1]
    assert json.loads((kept / "volume.json").read_text())["name"] == name
    assert {"events.json", "h1-paths.txt", "s1-dataplane.txt", "s3-journal.txt"} <= {
        f.name for f in kept.iterdir()
    }
    calls = [c for _, c in lab.calls]
    shown = calls.index(f"nodeos volume show {name} --json")
    read = max(i for i, c in enumerate(calls[:shown]) if "sha256sum" in c)
    assert not any(c.startswith("nvme disconnect") for c in calls[read:shown]), "disconnected first"
    assert any(c.startswith("nvme disconnect") for c in calls[shown:])


def test_a_read_that_returns_nothing_is_a_failed_host_read_not_a_lost_write(tmp_path: Path) -> None:
    r = _soak(FakeLab(tmp_path, read_fails=True), seed=1)
    failed = [v for v in r.violations if "host read failed" in v.what]
    assert failed and "Input/output error" in failed[0].what, r.render()
    assert not any("acknowledged write lost" in v.what for v in r.violations), r.render()


def test_a_command_past_its_bound_is_a_violation_with_what_was_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = FakeLab(tmp_path)
    clock = iter(range(0, 10**9, 1000))  # every monotonic() 1000 s later: past every bound
    real = soak_mod.time.monotonic
    monkeypatch.setattr(soak_mod.time, "monotonic", lambda: float(next(clock)))
    s = Soak(lab, 3, minutes=10**6, steps=3, log=lambda m: None)  # type: ignore[arg-type]
    r = s.run()
    monkeypatch.setattr(soak_mod.time, "monotonic", real)
    past = [v for v in r.violations if "past its bound" in v.what]
    assert past and past[0].what.startswith("`nodeos ")


class CrashingLab(FakeLab):
    """s2's kernel dies at its `after`-th console command: every later command there raises."""

    def __init__(self, tmp: Path, after: int) -> None:
        super().__init__(tmp)
        self.after, self.asked_dead = after, 0

    def exec(self, vm: str, argv: list[str], timeout: float = 120.0, input: Any = None) -> ExecResult:
        if vm == "s2" and argv[0] == "nodeos":
            self.after -= 1
            if self.after < 0:
                self.asked_dead += 1
                first = "traps: PANIC: double fault, error_code: 0x0"
                report = KernelReport("double fault", first, 0, fatal=True)
                trouble = KernelTrouble("s2", [report])
                raise GuestKernelCrashed(trouble.message("console.log"), trouble)
        return super().exec(vm, argv, timeout, input)


@pytest.mark.parametrize("after", [3, 12])
def test_a_vm_whose_kernel_crashed_ends_the_run_at_once_naming_the_crash(tmp_path: Path, after: int) -> None:
    """CI, 2026-12-01: the teardown asked a crashed s2 for its pool until pytest's 30 min bound."""
    lab = CrashingLab(tmp_path, after)
    r = _soak(lab, seed=5, steps=80)
    assert not r.ok
    assert lab.asked_dead == 1, "the dead VM was asked again"
    stopped = [v for v in r.violations if "the soak stopped" in v.what]
    assert len(stopped) == 1, r.render()
    assert "s2's kernel crashed" in stopped[0].what and "double fault" in stopped[0].what
    assert r.last_step < 80


def test_a_volume_that_stays_out_of_sync_and_a_leftover_are_violations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = FakeLab(tmp_path)
    monkeypatch.setattr(soak_end, "SETTLE_S", 0)
    monkeypatch.setattr(soak_end, "LEFTOVER_S", 0)
    # Sleeps are no-ops here: a bound of real seconds would be spun through in full.
    monkeypatch.setitem(soak_mod.FAULT_BOUNDS_S, "ready", 0)
    real_create = lab._console

    def console(vm: str, args: list[str]) -> ExecResult:
        out = real_create(vm, args)
        if args[:2] == ["volume", "create"]:
            lab.sick.add(args[2])
        return out

    monkeypatch.setattr(lab, "_console", console)
    monkeypatch.setattr(Soak, "leftovers", lambda self: ["s2: md arrays left: md127"])
    r = _soak(lab, seed=4, steps=20)
    assert any("not healthy" in v.what and "replicas in sync" in v.what for v in r.violations), r.render()
    assert any("leftover" in v.what and "md127" in v.what for v in r.violations)
    assert any("not back in sync" in v.what for v in r.violations) or "fio_start" not in r.counts


def test_a_refused_create_leaves_its_later_actions_skipped_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = FakeLab(tmp_path)
    real = lab._console

    def console(vm: str, args: list[str]) -> ExecResult:
        if args[:2] == ["volume", "create"]:
            return lab._err("no_room", 1)
        return real(vm, args)

    monkeypatch.setattr(lab, "_console", console)
    r = _soak(lab, seed=0, steps=40)
    assert r.ok, r.render()
    assert r.counts["create"]["refused"] >= 1 and r.refusals["create: no_room"] >= 1
    assert sum(c["skipped"] for c in r.counts.values()) >= 1


def test_sick_names_what_is_not_healthy() -> None:
    assert soak_end.sick({"kind": "volume", "name": "v", "state": "ready", "health": "2/2"}) == ""
    assert "1/2" in soak_end.sick({"kind": "volume", "name": "v", "state": "ready", "health": "1/2"})
    assert "failed" in soak_end.sick({"kind": "clone", "name": "c", "state": "failed", "health": "2/2"})
    assert soak_end.sick({"kind": "snapshot", "name": "s", "state": "ready", "health": "-"}) == ""
    assert soak_end.sick({"kind": "published", "name": "p", "state": "ready", "health": "3/3"}) == ""


def test_the_report_counts_and_renders() -> None:
    r = Report(9, "soak", ("cut",))
    r.count("create", "ok", 12.0)
    r.count("create", "refused", 3.0)
    r.refuse("create", "no_room")
    assert r.ok and "no violations" in r.render()
    r.violate(7, "step 7: cut s1", "it hung", "faults s1 cut")
    doc = r.to_json()
    assert doc["counts"] == {"create": {"ok": 1, "refused": 1}}
    assert doc["durations"]["create"] == {"n": 2, "median": 12.0, "max": 12.0}
    assert doc["replay"] == "nodeos-lab soak --seed 9 --steps 7 --faults cut"
    assert not r.ok and "while: faults s1 cut" in r.render()
    assert Report(9, "mylab", ()).replay() == "nodeos-lab soak --seed 9 --steps 1 --faults none --lab mylab"


class ResyncLab(FakeLab):
    """A volume resyncs for two `volume list`s after a mark is written to it; a fault while it
    does takes the only in-sync copy of the mark with it (a double fault, for a 2-way mirror)."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.resync: dict[str, int] = {}
        self.lost: set[str] = set()
        self.replugged = ""

    def _row(self, name: str) -> dict[str, Any]:
        row = super()._row(name)
        if self.resync.get(name, 0) > 0:
            row["health"] = f"0/{row['replicas']}"
        return row

    def _console(self, vm: str, args: list[str]) -> ExecResult:
        out = super()._console(vm, args)
        if args[1:2] == ["list"]:
            self.resync = {n: k - 1 for n, k in self.resync.items() if k > 1}
        return out

    def _fault_now(self) -> None:
        self.lost |= set(self.resync)

    def kill(self, vm: str) -> None:
        if vm != self.replugged:  # a drive's heal power-cycles its VM: that node held no in-sync copy
            self._fault_now()
        self.replugged = ""
        super().kill(vm)

    def plug(self, vm: str, serial: str) -> None:
        self.replugged = vm
        super().plug(vm, serial)

    def cut(self, vm: str) -> None:
        self._fault_now()
        super().cut(vm)

    def unplug(self, vm: str, serial: str) -> None:
        self._fault_now()
        super().unplug(vm, serial)

    def _script(self, vm: str, script: str) -> ExecResult:
        name = self.connected.rsplit(":", 1)[-1]
        if "/tmp/mark" in script:
            self.resync[name] = 2
        if "sha256sum" in script and name in self.lost:
            self.lost.discard(name)
            return _res(0, "lost\n")
        return super()._script(vm, script)


def test_no_fault_while_a_volume_holding_a_mark_is_out_of_sync(tmp_path: Path) -> None:
    """Seed 7's 60-minute soak: a mark written to v7 right after its other replica's node came
    back, then v7's primary's drive pulled while that replica was still being copied: a double
    fault, which may rightly lose the write, but it read as a finding. The soak waits, before a
    fault, for every volume whose data it checks (fio or a mark) to be back in sync."""
    lab = ResyncLab(tmp_path)
    for seed in range(3):
        r = _soak(lab, seed)
        assert r.ok, r.render()
    assert lab.marks  # marks were written, and faults followed them


class OneNodeExportsNothingLab(FakeLab):
    """Discovery at s1 is refused (as at a node that exported nothing before the discovery
    anchor, nodeos/dataplane/kernel/nvmet.py; or one whose target is gone); s2 and s3 answer."""

    def _nvme(self, argv: list[str]) -> ExecResult:
        if argv[1] == "discover" and argv[argv.index("-a") + 1] == self.addr("s1"):
            return _res(1, "", "failed to connect socket: Connection refused")
        return super()._nvme(argv)


def test_the_host_finds_its_paths_though_the_first_node_serves_no_discovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 7: after a drain moved every volume off s1, the soak's readback asked s1 alone
    for discovery and found nothing for 600 s. A GPU node names every storage node."""
    monkeypatch.setitem(soak_mod.FAULT_BOUNDS_S, "ready", 0)
    lab = OneNodeExportsNothingLab(tmp_path)
    r = _soak(lab, seed=1, steps=60)
    assert r.ok, r.render()
    assert r.counts["readback"]["ok"] >= 1
    assert any("discover" in c and lab.addr("s2") in c for _, c in lab.calls)
