"""The seeded fault soak over a running cluster lab (the imperative shell of
tests/tooling/nodeos_devtools/lab/soak_plan.py).

    report = Soak(Lab("soak"), seed=7, minutes=60).run()

Set-up: a pool `soak` on every storage VM (all its drives), the first GPU node registered as a
host. Then the planner's actions, one at a time, until the minutes or `steps` run out: every
operation through the console (`nodeos ... --json`) of a storage VM that is up, retried while
the cluster answers `not_leader` / `unknown_outcome` (nothing done / maybe done: the operator's
retry), each within its bound (BOUNDS_S: a command past it is a violation, recorded with what
was running); faults through the lab (power-off, network cut, `kill -9` of nodeosd, a drive
pulled) and their heals; fio with verify and marks on the GPU node. Then the closing actions
(every fault healed, every fio checked, every mark read back), and:

- settled: within SETTLE_S every volume, clone and published volume is ready with every replica
  in sync (serving), every snapshot ready, or gone;
- teardown: everything the soak made is deleted, the host removed, the pools deleted (each
  command bounded as any other);
- clean: within LEFTOVER_S no node holds a leftover (leftovers.py, deep: LVs, md arrays, nvmet
  subsystems and ports, remote controllers, pending intents, stuck calls).

Whatever happens, faults are healed and drains undone before it returns, so the lab is whole;
but a VM's kernel dying ends the run at once, named (the lab's cleanliness check replaces it).
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeos.errors import OperationFailed
from nodeos_devtools.lab import soak_end, soak_evidence, soak_io
from nodeos_devtools.lab.console_scan import GuestKernelCrashed
from nodeos_devtools.lab.lab import Lab
from nodeos_devtools.lab.leftovers import leftovers
from nodeos_devtools.lab.soak_faults import Faults, NotInForce, cpu_hog
from nodeos_devtools.lab.soak_paths import PathWatch
from nodeos_devtools.lab.soak_plan import FAULTS, HEAL_OF, MARK_MIB, Action, Planner, Shape
from nodeos_devtools.lab.soak_report import Report

POOL = "soak"
# Seconds each console command may take (scaled by bound_scale). The console's own waits are set
# below these (create/clone/snapshot --timeout, delete's 300 s teardown wait), so a command that
# reaches its bound hung somewhere past them: issue 25's 3-replica delete, for one.
BOUNDS_S: dict[str, float] = {
    "create": 360, "clone": 360, "snapshot": 360, "publish": 900, "delete": 420, "unpublish": 420,
    "grant": 180, "revoke": 180, "resize": 360, "drain": 180, "undrain": 180, "show": 120, "list": 120,
    "pool": 360, "host": 180, "status": 120,
}  # fmt: skip
FAULT_BOUNDS_S: dict[str, float] = {"daemon_back": 900, "fio_grace": 900, "ready": 600}
RETRIED = ("not_leader", "unknown_outcome")
DATA_ACTIONS = ("write", "readback", "fio_start", "fio_check")  # a violation in one keeps evidence
FAULT_OF = {heal: fault for fault, heal in HEAL_OF.items()}
MIB = 1024 * 1024


def lab_shape(lab: Lab) -> Shape:
    """The lab as the planner sees it: VM names, each storage VM's capacity (its drives' pool)."""
    caps = [sum(Path(d["path"]).stat().st_size for d in lab.spec(vm).drives) // MIB for vm in lab.storage_vms]
    return Shape(tuple(lab.storage_vms), tuple(lab.host_vms), min(caps) if caps else 0)


@dataclass
class Live:
    """An object the cluster said it made."""

    kind: str
    nqn: str = ""
    size_mib: int = 0  # as created: fio and the mark live below it
    granted: bool = False
    fio: bool = False
    mark: str = ""  # sha256 of the mark written, "" if none


@dataclass
class Answer:
    outcome: str  # ok | refused | failed
    doc: Any = None
    code: str = ""


class Skip(Exception):
    """The planned action's object does not exist for real (an earlier step was refused)."""


class Soak:
    def __init__(
        self,
        lab: Lab,
        seed: int,
        *,
        minutes: float,
        steps: int | None = None,
        faults: tuple[str, ...] = FAULTS,
        hog: bool = False,
        bound_scale: float = 1.0,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.lab = lab
        self.shape = lab_shape(lab)
        self.planner = Planner(seed, self.shape, faults)
        self.report = Report(seed, lab.name, tuple(faults), hog)
        self.minutes, self.max_steps, self.scale = minutes, steps, bound_scale
        self.host = self.shape.hosts[0]
        self.hostnqn = lab.spec(self.host).hostnqn
        self.live: dict[str, Live] = {}
        self.faults = Faults(lab, FAULT_BOUNDS_S["daemon_back"] * bound_scale)
        self.down = self.faults.down  # storage VM -> fault in force for real
        self.drained = ""
        self.recent: deque[str] = deque(maxlen=4)
        self.step = 0
        self.deadline = time.monotonic() + minutes * 60
        self.log = log or (lambda msg: print(f"soak: {msg}", file=sys.stderr, flush=True))
        self.paths = PathWatch(lab, self.host, self._vias, self.log)  # the host learns moved paths

    # ---- the run --------------------------------------------------------------------
    def run(self) -> Report:
        r = self.report
        crashed = False
        with cpu_hog(r.hog):
            try:
                self.paths.start()
                self._setup()
                deadline = self.deadline = time.monotonic() + self.minutes * 60
                # Checked before an action is drawn: one drawn is in the planner's model, and the
                # closing actions are computed from that model.
                while time.monotonic() < deadline and not (
                    self.max_steps and self.planner.step >= self.max_steps
                ):
                    self._do(self.planner.next())
                for a in self.planner.closing():
                    self._do(a)
                soak_end.settle(self)
            except GuestKernelCrashed as e:  # not asked on: CI's teardown asked a dead s2 for 20 min
                r.violate(self.step, "runner", f"the soak stopped: {e}", self._running())
                crashed = True
            except Exception as e:  # the soak itself broke: say where, then hand the lab back whole
                r.violate(self.step, "runner", f"the soak stopped: {type(e).__name__}: {e}", self._running())
            finally:
                self.paths.stop()
                r.notes.append(f"the host learned {self.paths.connected} path(s) of volumes under fio")
                if not crashed:
                    self._restore()
                    self._final()
        r.ended = time.time()
        return r

    def _final(self) -> None:
        try:
            soak_end.teardown(self)
            soak_end.clean(self)
        except Exception as e:
            self.report.violate(self.step, "teardown", f"{type(e).__name__}: {e}", self._running())

    def _setup(self) -> None:
        for vm in self.shape.storage:
            self.faults.wait_daemon(vm, FAULT_BOUNDS_S["daemon_back"] * self.scale)
        setup = Action(0, "setup")
        for vm in self.shape.storage:
            ans = self.nodeos(setup, ["pool", "create", POOL, "--drives", "all"], "pool", via=vm, count=False)
            if ans.outcome != "ok":
                raise OperationFailed(f"pool create on {vm}: {ans.doc}")
        soak_io.host_setup(self.lab, self.host)
        ans = self.nodeos(setup, ["host", "add", self.hostnqn], "host", count=False)
        if ans.outcome != "ok" and ans.code != "already_exists":
            raise OperationFailed(f"host add {self.hostnqn}: {ans.doc}")

    def _do(self, a: Action) -> None:
        self.step = a.step
        self.report.steps += 1
        self.report.last_step = a.step
        self.log(a.describe())
        t0 = time.monotonic()
        try:
            if a.kind in FAULTS:
                outcome = self._fault(a)
            elif a.kind in FAULT_OF:
                outcome = self._undo(a)
            else:
                outcome = getattr(self, f"_{a.kind}")(a)
        except Skip as e:
            self.log(f"  skipped: {e}")
            outcome = "skipped"
        except GuestKernelCrashed:
            raise  # the run ends: nothing after it says anything about nodeos (run() names it)
        except Exception as e:
            what = f"{type(e).__name__}: {str(e)[:1500]}"
            if a.kind in DATA_ACTIONS:
                what += self.evidence(a)
            self.report.violate(a.step, a.describe(), what, self._running())
            outcome = "failed"
        self.report.count(a.kind, outcome, time.monotonic() - t0)
        self.recent.append(a.describe())

    def evidence(self, a: Action) -> str:
        """Keep what the cluster and the VMs show about a data violation's volume (soak_evidence.py)."""
        up = [vm for vm in self.shape.storage if vm not in self.down]
        dest = soak_evidence.evidence_dir(self.lab, self.report.started, a.step)
        try:
            o = self.live.get(a.target)
            mark = (o.size_mib // 2, MARK_MIB) if o is not None and o.size_mib else None
            kept = soak_evidence.collect(self.lab, self.up_vm(), self.host, a.target, dest, up, mark)
            return f" (evidence: {kept})"
        except Exception as e:  # best effort: the violation stands without it
            return f" (no evidence: {type(e).__name__}: {e})"

    def _running(self) -> str:
        parts = []
        if self.down:
            parts.append("faults " + ", ".join(f"{vm} {k}" for vm, k in sorted(self.down.items())))
        fio = sorted(n for n, o in self.live.items() if o.fio)
        if fio:
            parts.append("fio on " + ", ".join(fio))
        if self.drained:
            parts.append(f"{self.drained} drained")
        if self.recent:
            parts.append("after " + "; ".join(self.recent))
        return " | ".join(parts)

    # ---- the console ------------------------------------------------------------------
    def up_vm(self) -> str:
        for vm in self.shape.storage:
            if vm not in self.down:
                return vm
        raise OperationFailed("no storage VM is up")

    def nodeos(self, a: Action, args: list[str], bound: str, *, via: str = "", count: bool = True) -> Answer:
        """`nodeos ARGS --json` in a storage VM, asked again while the cluster says it did nothing
        (or may have); past BOUNDS_S[bound] it is a violation. Refusals are counted, not violations:
        which ones a fault explains is for the report's reader."""
        via = via or (a.via if a.via and a.via not in self.down else self.up_vm())
        limit = BOUNDS_S[bound] * self.scale
        t0 = time.monotonic()
        asked = 0
        while True:
            left = limit - (time.monotonic() - t0)
            cmd = f"`nodeos {' '.join(args)}` via {via}"
            try:
                r = self.lab.exec(via, ["nodeos", *args, "--json"], timeout=max(left, 30) + 60)
            except GuestKernelCrashed:
                raise
            except OperationFailed as e:  # killed at its timeout (a hang), or the VM went away
                self.report.violate(
                    a.step, a.describe(), f"{cmd} did not return: {str(e)[:600]}", self._running()
                )
                return Answer("failed", str(e))
            took = time.monotonic() - t0
            if took > limit:
                self.report.violate(
                    a.step,
                    a.describe(),
                    f"{cmd} took {took:.0f} s, past its bound of {limit:.0f} s",
                    self._running(),
                )
            doc = _parse(r.stdout)
            if r.rc == 0:
                return Answer("ok", doc)
            if not isinstance(doc, dict):
                self.report.violate(
                    a.step, a.describe(), f"{cmd} exited {r.rc} without a JSON error: {r.stderr[-500:]}"
                )
                return Answer("failed", r.stderr)
            code = str((doc.get("error") or {}).get("code") or f"exit {r.rc}")
            if code == "already_exists" and asked:
                return Answer("ok", doc)  # a retried create that the first try had done
            if code in RETRIED and time.monotonic() - t0 < limit - 10:
                asked += 1
                time.sleep(3)
                continue
            if count:
                self.report.refuse(a.kind, code)
            self.log(f"  refused: {code}: {str((doc.get('error') or {}).get('message'))[:200]}")
            return Answer("refused", doc, code)

    def _live(self, name: str) -> Live:
        o = self.live.get(name)
        if o is None:
            raise Skip(f"{name} does not exist (its creation was refused or it is gone)")
        return o

    def _made(self, a: Action, name: str, kind: str, ans: Answer, size_mib: int) -> str:
        """Record what a create-like command made; a refused one may still have left an object
        (a failed volume): ask, so the teardown finds it."""
        if ans.outcome != "ok" or not (isinstance(ans.doc, dict) and "state" in ans.doc):
            # Refused, or an already_exists after a retry (no object in the answer): ask.
            shown = self.nodeos(a, ["volume", "show", name], "show", count=False)
            if shown.outcome != "ok":
                return ans.outcome
            ans = Answer(ans.outcome, shown.doc)
        doc = ans.doc if isinstance(ans.doc, dict) else {}
        self.live[name] = Live(kind, str(doc.get("nqn") or ""), size_mib)
        return "ok" if ans.outcome == "ok" and doc.get("state") == "ready" else "refused"

    # ---- operations -------------------------------------------------------------------
    def _create(self, a: Action) -> str:
        s, r = a.arg("size_mib"), a.arg("replicas")
        t = int(BOUNDS_S["create"] * self.scale) - 60
        args = ["volume", "create", a.target, "--size", f"{s}MiB", "--replicas", str(r), "--timeout", str(t)]
        return self._made(a, a.target, "volume", self.nodeos(a, args, "create"), s)

    def _snapshot(self, a: Action) -> str:
        o = self._live(a.target)
        ans = self.nodeos(a, ["volume", "snapshot", a.target, a.arg("name")], "snapshot")
        return self._made(a, a.arg("name"), "snapshot", ans, o.size_mib)

    def _clone(self, a: Action) -> str:
        o = self._live(a.target)
        args = ["volume", "clone", a.target, a.arg("name"), "--replicas", str(a.arg("replicas"))]
        return self._made(a, a.arg("name"), "clone", self.nodeos(a, args, "clone"), o.size_mib)

    def _publish(self, a: Action) -> str:
        o = self._live(a.target)
        t = int(BOUNDS_S["publish"] * self.scale) - 60
        args = ["volume", "publish", a.target, a.arg("name"), "--replicas", str(a.arg("replicas"))]
        args += ["--timeout", str(t)]
        return self._made(a, a.arg("name"), "published", self.nodeos(a, args, "publish"), o.size_mib)

    def _delete(self, a: Action) -> str:
        o = self._live(a.target)
        args = ["volume", "delete", a.target] + (["--force"] if o.granted or o.kind == "snapshot" else [])
        ans = self.nodeos(a, args, "delete")
        if ans.outcome == "ok":
            self.live.pop(a.target, None)
        return ans.outcome

    def _unpublish(self, a: Action) -> str:
        self._live(a.target)
        ans = self.nodeos(a, ["volume", "unpublish", a.target], "unpublish")
        if ans.outcome == "ok":
            self.live.pop(a.target, None)
        return ans.outcome

    def _grant(self, a: Action) -> str:
        o = self._live(a.target)
        ans = self.nodeos(a, ["volume", "grant", a.target, "--host", self.hostnqn], "grant")
        o.granted = o.granted or ans.outcome == "ok"
        return ans.outcome

    def _revoke(self, a: Action) -> str:
        o = self._live(a.target)
        if not o.granted:
            raise Skip(f"{a.target} was never granted")
        ans = self.nodeos(a, ["volume", "revoke", a.target, "--host", self.hostnqn], "revoke")
        o.granted = o.granted and ans.outcome != "ok"
        return ans.outcome

    def _resize(self, a: Action) -> str:
        self._live(a.target)
        shown = self.nodeos(a, ["volume", "show", a.target], "show")
        size = int((shown.doc or {}).get("size_bytes") or 0) // MIB if shown.outcome == "ok" else 0
        if not size:
            return shown.outcome
        return self.nodeos(a, ["volume", "resize", a.target, "--size", f"{size + 16}MiB"], "resize").outcome

    def _drain(self, a: Action) -> str:
        ans = self.nodeos(a, ["node", "drain", a.target, "--no-wait"], "drain")
        if ans.outcome == "ok":
            self.drained = a.target
        return ans.outcome

    def _undrain(self, a: Action) -> str:
        if not self.drained:
            raise Skip(f"{a.target} was not drained (its drain was refused)")
        ans = self.nodeos(a, ["node", "undrain", a.target], "undrain")
        if ans.outcome == "ok":
            self.drained = ""
        return ans.outcome

    def _pause(self, a: Action) -> str:
        time.sleep(float(a.arg("seconds")))
        return "ok"

    # ---- the GPU node -----------------------------------------------------------------
    def _usable(self, name: str) -> Live:
        o = self._live(name)
        if not o.granted or not o.nqn:
            raise Skip(f"{name} is not granted to {self.host}")
        return o

    def _connect(self, o: Live) -> str:
        """Connect every path, waiting (bounded) for the volume to be ready: right after a heal a
        volume may still be re-exported. Discovery at every storage VM that is up, as a GPU
        node's discovery.conf would name them: one node may answer none (seed 7: a drained node
        that exported nothing, before the discovery anchor; asking it alone found nothing for
        600 s)."""
        deadline = time.monotonic() + FAULT_BOUNDS_S["ready"] * self.scale
        while True:
            try:
                return soak_io.connect(self.lab, self.host, o.nqn, self._vias())
            except (RuntimeError, OperationFailed):
                if time.monotonic() > deadline:
                    raise
                time.sleep(10)

    def _vias(self) -> list[str]:
        return [self.lab.addr(vm) for vm in self.shape.storage if vm not in dict(self.down)]

    def _fio_start(self, a: Action) -> str:
        o = self._usable(a.target)
        dev = self._connect(o)
        # Never past the run's minutes by much: the closing fio_check waits for the job to end.
        runtime = min(int(a.arg("runtime_s")), max(30, int(self.deadline - time.monotonic())))
        soak_io.fio_start(self.lab, self.host, a.target, dev, o.size_mib, runtime)
        o.fio = True
        self.paths.watch(o.nqn)
        return "ok"

    def _fio_check(self, a: Action) -> str:
        o = self._live(a.target)
        if not o.fio:
            raise Skip(f"no fio ran on {a.target}")
        job = soak_io.fio_wait(self.lab, self.host, a.target, FAULT_BOUNDS_S["fio_grace"] * self.scale + 300)
        o.fio = False
        self.paths.unwatch(o.nqn)
        soak_io.disconnect(self.lab, self.host, o.nqn)
        if job.get("error") != 0:
            what = f"fio on {a.target}: error {job.get('error')} (verify or I/O): {str(job)[-600:]}"
            what += self.evidence(a)
            self.report.violate(a.step, a.describe(), what, self._running())
            return "failed"
        return "ok"

    def _write(self, a: Action) -> str:
        o = self._usable(a.target)
        dev = self._connect(o)
        o.mark = soak_io.write_mark(self.lab, self.host, dev, o.size_mib // 2, MARK_MIB)
        soak_io.disconnect(self.lab, self.host, o.nqn)
        return "ok"

    def _readback(self, a: Action) -> str:
        o = self._live(a.target)
        if not o.mark:
            raise Skip(f"no mark was written on {a.target}")
        dev = self._connect(o)
        try:
            got = soak_io.read_mark(self.lab, self.host, dev, o.size_mib // 2, MARK_MIB)
        except soak_io.ReadFailed as err:
            # Not a lost write (nothing was read back to compare): the host's I/O failed, which
            # a fault must not cause either (the soak of 2026-11-30 took one for a lost write).
            got, what = "", f"host read failed on {a.target}: {err}"
        want, o.mark = o.mark, ""
        if got and got != want:
            what = f"acknowledged write lost: {a.target}'s mark reads back {got[:16]}, written {want[:16]}"
        if got != want:
            what += self.evidence(a)  # while the host still holds its paths
        soak_io.disconnect(self.lab, self.host, o.nqn)
        if got != want:
            self.report.violate(a.step, a.describe(), what, self._running())
            return "failed"
        return "ok"

    # ---- faults -----------------------------------------------------------------------
    def _in_sync_first(self, a: Action) -> None:
        """Before a fault: every volume whose data the soak checks (fio running, or a mark to
        read back) back to every replica in sync (bounded). A fault while a replica is still
        being copied is a double fault, which may rightly stop the volume or lose what only the
        faulted copy held (seed 7's 60-minute run: a mark written just after a heal, then the
        other node's drive pulled) and would make fio's errors or the mark no finding. Missing
        the bound is one: a replica that never comes back in sync after a heal."""
        fio = {n for n, o in self.live.items() if o.fio or o.mark}
        if not fio:
            return
        limit = FAULT_BOUNDS_S["ready"] * self.scale
        deadline = time.monotonic() + limit
        while True:
            ans = self.nodeos(a, ["volume", "list"], "list", count=False)
            rows = ans.doc if ans.outcome == "ok" and isinstance(ans.doc, list) else []
            bad = [w for w in (soak_end.sick(r) for r in rows if r.get("name") in fio) if w]
            if rows and not bad:
                return
            if time.monotonic() > deadline:
                what = f"not back in sync {limit:.0f} s after the last heal: {'; '.join(bad) or ans.doc}"
                self.report.violate(a.step, a.describe(), what, self._running())
                return
            time.sleep(5)

    def _fault(self, a: Action) -> str:
        self._in_sync_first(a)
        self.faults.inject(a.kind, a.target)
        return "ok"

    def _undo(self, a: Action) -> str:
        try:
            self.faults.undo(a.target, FAULT_OF[a.kind])
        except NotInForce as e:
            raise Skip(str(e)) from None
        return "ok"

    def _restore(self) -> None:
        """Every fault healed, the drain undone (best effort; a failure is a violation too)."""
        for vm, fault in sorted(self.down.items()):
            try:
                self.faults.undo(vm, fault)
            except Exception as e:
                self.report.violate(self.step, "restore", f"{fault} of {vm} not undone: {e}")
        if self.drained:
            ans = self.nodeos(
                Action(self.step, "undrain", self.drained), ["node", "undrain", self.drained], "undrain"
            )
            if ans.outcome == "ok":
                self.drained = ""

    def leftovers(self) -> list[str]:
        return leftovers(self.lab, deep=True)

    def violate(self, what: str) -> None:
        self.report.violate(self.step, "end", what, self._running())


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
