"""The seeded fault soak's planner (pure): from a seed and the lab's shape, the actions to take.

`Planner(seed, shape, faults=...)` hands out one `Action` at a time (`next()`), each valid in
its model of the appliance at that point, and `closing()` the actions that end a run (heal every
fault, undrain, check fio, read every mark back). It does no I/O and reads no clock: the same
seed and shape give the same sequence, so a failing seed replays (`nodeos-lab soak --seed N
--steps K` stops after step K).

What it models is what the console was asked, not what the cluster did: placement, failovers and
refusals are the runner's to observe (tests/tooling/nodeos_devtools/lab/soak.py). A planned action on an
object the
cluster refused to create is skipped by the runner and counted so; the plan stays the seed's.

The bounds, all checked by `why_invalid` (the unit tests run every action through it):
- volumes of 1-3 replicas, never more than the storage nodes placement can use (not faulted,
  not drained), capacity kept to half of the drives (thin pools, but fio, marks, snapshots and
  published copies write real blocks);
- at most one storage node faulted at a time; a second only when the seed allows it and the
  cluster keeps a majority up ((storage - 1) // 2 faulted at most) and every volume under fio
  keeps a replica on a node not faulted; no fault while a node is drained (its re-placement
  copies leave a volume a single in-sync copy: a fault then is a double fault); the runner also
  waits before each fault until the volumes under fio are back in sync (soak.py);
- fio and the marks (a block written, later read back) only on volumes the host may use: fio
  on replicated ones (a 1-replica volume is unavailable while its node is down: expected I/O
  errors, not a finding); a mark is written or read only while some replica is sure to be up;
- no delete, revoke or unpublish of what the host is using; a snapshot goes only once no clone
  or published volume was made from it (the product refuses otherwise, and rightly).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from nodeos.errors import BadInput

FAULTS = ("power", "cut", "kill", "drive")
# The heal of each fault: power -> start the VM; cut -> heal; kill -> wait for the unit's restart;
# drive -> plug it back (the runner then power-cycles the VM: see soak.py, _heal).
HEAL_OF = {"power": "power_on", "cut": "heal", "kill": "daemon_back", "drive": "plug"}
HEALS = tuple(HEAL_OF.values())
OPS = (
    "create", "delete", "snapshot", "clone", "publish", "unpublish", "grant", "revoke", "resize",
    "drain", "undrain", "fio_start", "fio_check", "write", "readback", "pause",
)  # fmt: skip
KINDS = OPS + FAULTS + HEALS
ON_HOST = ("fio_start", "fio_check", "write", "readback")  # the GPU node's: no console

MAX_OBJECTS = 8  # volumes, clones, snapshots and published volumes alive at once
MAX_FIO = 2  # fio jobs on the GPU node at once (768 MiB, one emulated CPU)
MAX_SNAPSHOTS = 2  # per volume
MAX_SIZE_MIB = 64
SIZES_MIB = (32, 48)
GROW_MIB = 16
MARK_MIB = 4  # a mark: 4 MiB of random data past fio's half of the volume
HOLD_STEPS = (1, 5)  # a fault lasts this many actions after it (then its heal is due)
FIO_RUNTIME_S = (60, 180)
PAUSE_S = (5, 30)


@dataclass(frozen=True)
class Shape:
    """What the planner needs of a lab: storage and GPU-node VM names and each storage VM's
    capacity (drives x size, MiB)."""

    storage: tuple[str, ...]
    hosts: tuple[str, ...]
    node_mib: int

    def __post_init__(self) -> None:
        if not self.storage:
            raise BadInput("the soak needs at least one storage VM", field="storage")
        if not self.hosts:
            raise BadInput("the soak needs a GPU-node VM (fio runs there)", field="hosts")
        if self.node_mib <= 0:
            raise BadInput(f"storage capacity {self.node_mib} MiB", field="drive_size", allowed=">= 1 MiB")


# What `nodeos-lab soak` boots without --lab (tests/tooling/nodeos_devtools/lab/soak.py, SOAK_LAB): 3 storage
# VMs of one
# 1 GiB drive each, one GPU node.
DEFAULT_SHAPE = Shape(("s1", "s2", "s3"), ("h1",), 1024)


@dataclass(frozen=True)
class Action:
    """One step: `kind` on `target` (an object or a VM), through `via`'s console."""

    step: int
    kind: str
    target: str = ""
    via: str = ""
    args: tuple[tuple[str, Any], ...] = ()

    def arg(self, key: str, default: Any = None) -> Any:
        return dict(self.args).get(key, default)

    def describe(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.args)
        via = f" via {self.via}" if self.via else ""
        return f"step {self.step}: {self.kind} {self.target}{' ' + extra if extra else ''}{via}".replace(
            "  ", " "
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "kind": self.kind,
            "target": self.target,
            "via": self.via,
            "args": dict(self.args),
        }


@dataclass
class Obj:
    """An object as the planner asked for it."""

    name: str
    kind: str  # volume | clone | snapshot | published
    replicas: int
    size_mib: int
    origin: str = ""  # the snapshot of a clone or a published volume; the volume of a snapshot
    granted: bool = False
    fio: bool = False
    marked: bool = False


@dataclass
class Model:
    objects: dict[str, Obj] = field(default_factory=dict)
    faults: dict[str, str] = field(default_factory=dict)  # VM -> fault kind
    held: dict[str, int] = field(default_factory=dict)  # VM -> actions since its fault
    drained: str = ""
    serial: int = 0

    def used_mib(self) -> int:
        return sum(o.size_mib * o.replicas for o in self.objects.values())

    def fio_count(self) -> int:
        return sum(o.fio for o in self.objects.values())

    def min_fio_replicas(self) -> int:
        return min((o.replicas for o in self.objects.values() if o.fio), default=99)


def max_faults(shape: Shape, allow_second: bool) -> int:
    """Storage nodes faulted at once: one, two only if the seed allows and a majority stays up."""
    return min(2 if allow_second else 1, (len(shape.storage) - 1) // 2) if len(shape.storage) > 1 else 0


def why_invalid(m: Model, a: Action, shape: Shape, allow_second: bool = False) -> str | None:
    """Why action `a` may not be taken in model `m` (None: it may). Independent of how the
    planner picks its candidates, so the tests hold the planner to it."""
    up = [vm for vm in shape.storage if vm not in m.faults]
    if a.kind not in KINDS:
        return f"unknown kind {a.kind}"
    if a.via and a.via not in up:
        return f"console via {a.via}, which is faulted or not a storage VM"
    o = m.objects.get(a.target)
    placeable = len([vm for vm in up if vm != m.drained])
    if a.kind in FAULTS:
        if a.target not in shape.storage or a.target in m.faults:
            return f"{a.kind} of {a.target}: not a healthy storage VM"
        if m.drained:  # a drain's copies leave a volume one in-sync copy: a fault then is a double one
            return f"{m.drained} is drained"
        if len(m.faults) + 1 > max_faults(shape, allow_second):
            return f"{len(m.faults)} fault(s) active already"
        if m.min_fio_replicas() <= len(m.faults) + 1:
            return "a volume under fio could lose every replica"
        return None
    if a.kind in HEALS:
        if HEAL_OF.get(m.faults.get(a.target, "")) != a.kind:
            return f"{a.kind} of {a.target}, whose fault is {m.faults.get(a.target)}"
        return None
    if a.kind == "pause":
        return None
    if (a.kind in ON_HOST) == bool(a.via):
        return "a console named for the GPU node's work, or none for the cluster's"
    if a.kind == "create":
        r, s = a.arg("replicas"), a.arg("size_mib")
        if a.target in m.objects:
            return f"{a.target} exists"
        if not 1 <= r <= min(3, placeable):
            return f"{r} replicas with {placeable} placeable node(s)"
        if len(m.objects) >= MAX_OBJECTS or m.used_mib() + r * s > budget_mib(shape):
            return "no room"
        return None
    if a.kind == "drain":
        if m.drained or m.faults or a.target not in shape.storage:
            return "a node is drained or faulted already"
        return None
    if a.kind == "undrain":
        return None if a.target == m.drained else f"{a.target} is not drained"
    if o is None:
        return f"{a.target} does not exist"
    reachable = o.replicas > len(m.faults)
    if a.kind == "delete":
        if o.kind == "published" or o.fio or o.marked:
            return f"{o.name} is published, under fio or holds a mark not read back"
        if any(x.origin == o.name and x.kind in ("clone", "published") for x in m.objects.values()):
            return f"{o.name} has clones or published copies"
        return None
    if a.kind == "unpublish":
        return (
            None
            if o.kind == "published" and not o.granted
            else f"{o.name}: not an ungranted published volume"
        )
    if a.kind == "snapshot":
        n = sum(1 for x in m.objects.values() if x.kind == "snapshot" and x.origin == o.name)
        if o.kind not in ("volume", "clone") or n >= MAX_SNAPSHOTS or a.arg("name") in m.objects:
            return f"no snapshot of {o.name}"
        return _room(m, shape, o.size_mib * o.replicas)
    if a.kind in ("clone", "publish"):
        if o.kind != "snapshot" or a.arg("name") in m.objects:
            return f"{a.kind} needs a snapshot and a free name"
        r = a.arg("replicas", o.replicas)
        if a.kind == "publish" and (
            not 1 <= r <= placeable or any(x.kind == "published" for x in m.objects.values())
        ):
            return f"publish to {r} of {placeable} placeable node(s), or one is published already"
        return _room(m, shape, o.size_mib * r)
    if a.kind == "grant":
        return None if o.kind in ("volume", "clone") and not o.granted else f"{o.name}: not grantable"
    if a.kind == "revoke":
        return None if o.granted and not o.fio and not o.marked else f"{o.name}: not granted or in use"
    if a.kind == "resize":
        if o.kind not in ("volume", "clone") or o.size_mib + GROW_MIB > MAX_SIZE_MIB:
            return f"{o.name}: not growable"
        return _room(m, shape, GROW_MIB * o.replicas)
    if a.kind == "fio_start":
        if not (o.granted and o.kind in ("volume", "clone") and o.replicas >= 2 and not o.fio):
            return f"{o.name}: fio needs a granted replicated volume not under fio"
        if m.fio_count() >= MAX_FIO or o.replicas <= len(m.faults) or o.marked:
            return "fio: too many jobs, a replica may be down, or a mark is pending"
        return None
    if a.kind == "fio_check":
        return None if o.fio else f"no fio on {o.name}"
    if a.kind == "write":
        if not (o.granted and not o.fio and not o.marked and reachable):
            return f"{o.name}: a mark needs a granted volume, no fio, no mark, a replica up"
        return None
    if a.kind == "readback":
        return None if o.marked and reachable else f"{o.name}: no mark or no replica sure to be up"
    return f"unhandled {a.kind}"


def budget_mib(shape: Shape) -> int:
    return len(shape.storage) * shape.node_mib // 2


def _room(m: Model, shape: Shape, more: int) -> str | None:
    if len(m.objects) >= MAX_OBJECTS or m.used_mib() + more > budget_mib(shape):
        return "no room"
    return None


def apply(m: Model, a: Action) -> None:
    """The model after `a` (as asked; the runner sees what really happened)."""
    o = m.objects.get(a.target)
    for vm in m.held:
        m.held[vm] += 1
    if a.kind in FAULTS:
        m.faults[a.target], m.held[a.target] = a.kind, 0
    elif a.kind in HEALS:
        m.faults.pop(a.target, None)
        m.held.pop(a.target, None)
    elif a.kind == "create":
        m.objects[a.target] = Obj(a.target, "volume", a.arg("replicas"), a.arg("size_mib"))
    elif a.kind in ("delete", "unpublish"):
        m.objects.pop(a.target, None)
    elif a.kind == "snapshot" and o is not None:
        m.objects[a.arg("name")] = Obj(a.arg("name"), "snapshot", o.replicas, o.size_mib, origin=o.name)
    elif a.kind in ("clone", "publish") and o is not None:
        kind = "clone" if a.kind == "clone" else "published"
        m.objects[a.arg("name")] = Obj(
            a.arg("name"), kind, a.arg("replicas", o.replicas), o.size_mib, origin=o.name
        )
    elif a.kind == "drain":
        m.drained = a.target
    elif a.kind == "undrain":
        m.drained = ""
    elif o is not None:
        if a.kind in ("grant", "revoke"):
            o.granted = a.kind == "grant"
        elif a.kind == "resize":
            o.size_mib += GROW_MIB
        elif a.kind in ("fio_start", "fio_check"):
            o.fio = a.kind == "fio_start"
        elif a.kind in ("write", "readback"):
            o.marked = a.kind == "write"


class Planner:
    """Seeded actions for a lab of `shape`; `faults` limits the kinds of fault (e.g. CI's cheap
    ones: cut and kill)."""

    def __init__(self, seed: int, shape: Shape, faults: tuple[str, ...] = FAULTS) -> None:
        bad = [f for f in faults if f not in FAULTS]
        if bad:
            raise BadInput(f"unknown fault kind(s) {', '.join(bad)}", field="faults", allowed=list(FAULTS))
        self.seed, self.shape, self.faults = seed, shape, tuple(faults)
        self.rng = random.Random(seed)
        # Whether this seed may hold a second node faulted (where the shape has a majority left).
        self.allow_second = self.rng.random() < 0.5
        self.model = Model()
        self.step = 0

    def __iter__(self) -> Iterator[Action]:
        while True:
            yield self.next()

    def next(self) -> Action:
        a = self._pick()
        problem = why_invalid(self.model, a, self.shape, self.allow_second)
        assert problem is None, f"planner chose an invalid action ({problem}): {a.describe()}"
        apply(self.model, a)
        self.step += 1
        return a

    def closing(self) -> list[Action]:
        """What ends a run from the model's state: every fault healed, the node undrained, every
        fio checked, every mark read back (once nothing is faulted)."""
        out: list[Action] = []
        for vm in sorted(self.model.faults):
            out.append(self._take(Action(self.step + 1, HEAL_OF[self.model.faults[vm]], vm)))
        if self.model.drained:
            out.append(self._take(Action(self.step + 1, "undrain", self.model.drained, self._via())))
        for o in sorted(self.model.objects.values(), key=lambda o: o.name):
            if o.fio:
                out.append(self._take(Action(self.step + 1, "fio_check", o.name)))
            if o.marked:
                out.append(self._take(Action(self.step + 1, "readback", o.name)))
        return out

    def _take(self, a: Action) -> Action:
        problem = why_invalid(self.model, a, self.shape, self.allow_second)
        assert problem is None, f"closing action invalid ({problem}): {a.describe()}"
        apply(self.model, a)
        self.step += 1
        return a

    # ---- choosing --------------------------------------------------------------------
    def _via(self) -> str:
        up = [vm for vm in self.shape.storage if vm not in self.model.faults]
        return self.rng.choice(up)

    def _pick(self) -> Action:
        m, step = self.model, self.step + 1
        due = sorted(vm for vm, n in m.held.items() if n >= HOLD_STEPS[1])
        if due:  # a fault held its longest: heal it now
            return Action(step, HEAL_OF[m.faults[due[0]]], due[0])
        healable = sorted(vm for vm, n in m.held.items() if n >= HOLD_STEPS[0])
        if healable and self.rng.random() < 0.3:
            vm = self.rng.choice(healable)
            return Action(step, HEAL_OF[m.faults[vm]], vm)
        if self.faults and self.rng.random() < 0.15:
            fault = self._fault(step)
            if fault is not None:
                return fault
        weights = dict(WEIGHTS)
        if not m.fio_count():  # the soak's point is faults under I/O: get fio going
            weights["fio_start"] *= 4
            weights["grant"] *= 2
        for _ in range(20):
            kind = self.rng.choices(list(weights), weights=list(weights.values()))[0]
            a = self._op(kind, step)
            if a is not None:
                return a
        return Action(step, "pause", args=(("seconds", self.rng.randint(*PAUSE_S)),))

    def _fault(self, step: int) -> Action | None:
        kind = self.rng.choice(self.faults)
        for vm in self.rng.sample(list(self.shape.storage), len(self.shape.storage)):
            a = Action(step, kind, vm)
            if why_invalid(self.model, a, self.shape, self.allow_second) is None:
                return a
        return None

    def _placeable(self) -> int:
        m = self.model
        return len([vm for vm in self.shape.storage if vm not in m.faults and vm != m.drained])

    def _op(self, kind: str, step: int) -> Action | None:
        """An action of `kind` valid now, on an object drawn among those it is valid for."""
        rng, m = self.rng, self.model
        via = self._via()
        if kind == "pause":
            return Action(step, "pause", args=(("seconds", rng.randint(*PAUSE_S)),))
        if kind == "create":
            r = rng.randint(1, max(1, min(3, self._placeable())))
            args = (("replicas", r), ("size_mib", rng.choice(SIZES_MIB)))
            cands = [Action(step, "create", f"v{m.serial + 1}", via, args)]
        elif kind in ("drain", "undrain"):
            cands = [Action(step, kind, vm, via) for vm in self.shape.storage]
        else:
            name = f"{NEW_PREFIX.get(kind, '')}{m.serial + 1}"
            cands = []
            for o in sorted(m.objects.values(), key=lambda o: o.name):
                if kind == "snapshot":
                    args = (("name", name),)
                elif kind == "clone":
                    args = (("name", name), ("replicas", o.replicas))
                elif kind == "publish":
                    args = (("name", name), ("replicas", rng.randint(1, max(1, self._placeable()))))
                elif kind == "fio_start":
                    args = (("runtime_s", rng.randint(*FIO_RUNTIME_S)),)
                else:
                    args = ()
                cands.append(Action(step, kind, o.name, "" if kind in ON_HOST else via, args))
        cands = [a for a in cands if why_invalid(m, a, self.shape, self.allow_second) is None]
        if not cands:
            return None
        a = rng.choice(cands)
        if kind in ("create", "snapshot", "clone", "publish"):
            m.serial += 1  # the name drawn above is taken
        return a


NEW_PREFIX = {"snapshot": "snap", "clone": "c", "publish": "pub"}
# Relative weights of the operations (faults and heals are drawn apart, above).
WEIGHTS: dict[str, int] = {
    "create": 12, "delete": 4, "snapshot": 6, "clone": 4, "publish": 2, "unpublish": 3, "grant": 8,
    "revoke": 3, "resize": 4, "drain": 2, "undrain": 4, "fio_start": 8, "fio_check": 3, "write": 6,
    "readback": 5, "pause": 2,
}  # fmt: skip


def plan(seed: int, shape: Shape, steps: int, faults: tuple[str, ...] = FAULTS) -> list[Action]:
    """The first `steps` actions of a seed, then its closing (a dry run's listing, the tests')."""
    p = Planner(seed, shape, faults)
    out = [p.next() for _ in range(steps)]
    return out + p.closing()


def shape_of(storage: list[str], hosts: list[str], drives_mib: list[int]) -> Shape:
    """A Shape from a lab: its smallest storage VM's capacity is every one's (placement may use any)."""
    return Shape(tuple(storage), tuple(hosts), min(drives_mib) if drives_mib else 0)


def check_args(
    seed: int, minutes: float, steps: int | None, faults: str, bound_scale: float
) -> tuple[int, float, int | None, tuple[str, ...], float]:
    """The soak's command line, checked: bad input names its field (exit 2, nothing booted)."""
    if seed < 0:
        raise BadInput(f"seed {seed} is negative", field="seed", allowed=">= 0")
    if not 0 < minutes <= 7 * 24 * 60:
        raise BadInput(f"{minutes} minutes is out of range", field="minutes", allowed="0 < M <= 10080")
    if steps is not None and steps < 1:
        raise BadInput(f"{steps} steps is out of range", field="steps", allowed=">= 1")
    kinds = tuple(f.strip() for f in faults.split(",") if f.strip()) if faults != "none" else ()
    bad = [f for f in kinds if f not in FAULTS]
    if bad or len(set(kinds)) != len(kinds):
        raise BadInput(
            f"faults {faults!r}", field="faults", allowed=f"a list of {', '.join(FAULTS)}, or none"
        )
    if not 0 < bound_scale <= 100:
        raise BadInput(f"bound scale {bound_scale}", field="bound_scale", allowed="0 < X <= 100")
    return seed, minutes, steps, kinds, bound_scale
