"""The soak's planner (tests/tooling/nodeos_devtools/lab/soak_plan.py), no VMs: the same seed gives the same
actions,
every action is valid in the model at its point (checked by replaying it through `why_invalid`
on a model of our own), faults stay within their bounds, and a run's closing leaves nothing
faulted, drained, under fio or unread."""

from __future__ import annotations

import json
import sys
from collections import Counter

import pytest

from nodeos.errors import BadInput
from nodeos_devtools.lab.soak_plan import (
    FAULTS,
    HEAL_OF,
    HEALS,
    HOLD_STEPS,
    KINDS,
    Action,
    Model,
    Obj,
    Planner,
    Shape,
    apply,
    budget_mib,
    check_args,
    max_faults,
    plan,
    why_invalid,
)

THREE = Shape(("s1", "s2", "s3"), ("h1",), 512)
FIVE = Shape(("s1", "s2", "s3", "s4", "s5"), ("h1", "h2"), 1024)
SEEDS = range(20)


def test_the_same_seed_gives_the_same_actions_and_another_seed_others() -> None:
    for seed in range(10):
        assert plan(seed, THREE, 150) == plan(seed, THREE, 150)
    assert len({json.dumps([a.to_json() for a in plan(s, THREE, 60)]) for s in range(10)}) == 10


def test_a_run_drawn_one_action_at_a_time_is_the_prefix_of_a_longer_plan() -> None:
    """The runner draws until its minutes run out; `--steps K` replays the first K of them."""
    for seed in range(5):
        p = Planner(seed, THREE)
        drawn = [p.next() for _ in range(37)]
        assert drawn == plan(seed, THREE, 120)[:37]
        assert [a.step for a in drawn] == list(range(1, 38))


def _replay(actions: list[Action], shape: Shape, allow_second: bool) -> list[Model]:
    """Every action checked against a model built here from the actions alone; the models seen."""
    m, seen = Model(), []
    for a in actions:
        problem = why_invalid(m, a, shape, allow_second)
        assert problem is None, f"{a.describe()}: {problem}"
        apply(m, a)
        seen.append(_copy(m))
    return seen


def _copy(m: Model) -> Model:
    objs = {n: Obj(**vars(o)) for n, o in m.objects.items()}
    return Model(objs, dict(m.faults), dict(m.held), m.drained, m.serial)


@pytest.mark.parametrize("shape", [THREE, FIVE], ids=["3 storage", "5 storage"])
def test_every_action_is_valid_in_the_model_and_every_bound_holds(shape: Shape) -> None:
    for seed in SEEDS:
        p = Planner(seed, shape)
        actions = [p.next() for _ in range(100)] + p.closing()
        models = _replay(actions, shape, p.allow_second)
        for a, m in zip(actions, models, strict=True):
            assert len(m.faults) <= max_faults(shape, p.allow_second), a.describe()
            assert not (m.faults and m.drained), a.describe()
            assert m.used_mib() <= budget_mib(shape)
            assert len(m.objects) <= 8
            for o in m.objects.values():
                # A published volume may be on every node; anything else holds 1-3 replicas.
                top = len(shape.storage) if o.kind == "published" else min(3, len(shape.storage))
                assert 1 <= o.replicas <= top
                if o.fio:  # a volume under fio keeps a replica on a node no fault touches
                    assert o.replicas > len(m.faults) and o.replicas >= 2 and o.granted
            if a.kind == "create":
                assert a.arg("replicas") <= len([vm for vm in shape.storage if vm not in m.faults])
            assert all(n <= HOLD_STEPS[1] for n in m.held.values()), a.describe()
        last = models[-1]
        assert not last.faults and not last.drained
        assert not any(o.fio or o.marked for o in last.objects.values())


def test_three_storage_vms_never_have_two_faulted_and_five_do_when_the_seed_allows() -> None:
    assert max_faults(THREE, True) == 1
    assert max_faults(FIVE, False) == 1 and max_faults(FIVE, True) == 2
    seen_two = False
    for seed in SEEDS:
        p = Planner(seed, FIVE)
        for m in _replay([p.next() for _ in range(200)], FIVE, p.allow_second):
            seen_two = seen_two or len(m.faults) == 2
            assert len(m.faults) < 2 or p.allow_second
    assert seen_two, "no seed of 20 held two storage VMs faulted on a 5-node lab"


def test_every_fault_is_healed_by_its_own_heal() -> None:
    for seed in SEEDS:
        actions = plan(seed, THREE, 150)
        open_: dict[str, str] = {}
        for a in actions:
            if a.kind in FAULTS:
                open_[a.target] = a.kind
            elif a.kind in HEALS:
                assert HEAL_OF[open_.pop(a.target)] == a.kind, a.describe()
        assert not open_


def test_only_the_fault_kinds_asked_for_are_drawn() -> None:
    kinds = Counter(a.kind for seed in SEEDS for a in plan(seed, THREE, 80, ("cut", "kill")))
    assert kinds["cut"] and kinds["kill"]
    assert not (kinds["power"] or kinds["drive"])
    assert not any(a.kind in FAULTS for a in plan(1, THREE, 80, ()))


def test_twenty_seeds_reach_every_operation_fault_and_heal() -> None:
    kinds = Counter(a.kind for seed in SEEDS for a in plan(seed, THREE, 120))
    assert set(KINDS) - set(kinds) == set(), f"never drawn: {set(KINDS) - set(kinds)}"


def _model(**objs: Obj) -> Model:
    return Model(objects=dict(objs))


def _create(r: int, via: str = "s2") -> Action:
    return Action(1, "create", "v9", via, (("replicas", r), ("size_mib", 32)))


def _vol(replicas: int = 2, size: int = 32, **kw: bool) -> Model:
    return _model(v1=Obj("v1", "volume", replicas, size, **kw))


FIO = Action(1, "fio_start", "v1", "", (("runtime_s", 60),))
WITH_CLONE = _model(s=Obj("s", "snapshot", 2, 32, origin="v1"), c=Obj("c", "clone", 2, 32, origin="s"))


@pytest.mark.parametrize(
    "model, action, reason",
    [
        (Model(faults={"s1": "cut"}), _create(3), "placeable"),
        (Model(drained="s1"), _create(3), "placeable"),
        (Model(faults={"s1": "cut"}), Action(1, "power", "s2"), "active already"),
        (Model(drained="s2"), Action(1, "cut", "s1"), "drained"),
        (Model(faults={"s1": "kill"}), _create(1, via="s1"), "console"),
        (_vol(granted=True, fio=True), Action(1, "delete", "v1", "s1"), "fio"),
        (_vol(granted=True, fio=True), Action(1, "revoke", "v1", "s1"), "in use"),
        (_vol(1, granted=True), FIO, "replicated"),
        (_vol(), FIO, "granted"),
        (WITH_CLONE, Action(1, "delete", "s", "s1"), "clones"),
        (_vol(1, granted=True, marked=True), Action(1, "delete", "v1", "s1"), "mark"),
        (_vol(1, 64), Action(1, "resize", "v1", "s1"), "growable"),
        (Model(), Action(1, "heal", "s1"), "whose fault"),
        (Model(faults={"s1": "power"}), Action(1, "heal", "s1"), "whose fault"),
        (_vol(), Action(1, "fio_check", "v1", "s1"), "console named"),
    ],
)
def test_invalid_actions_are_named_invalid(model: Model, action: Action, reason: str) -> None:
    problem = why_invalid(model, action, THREE)
    assert problem is not None and reason in problem, problem


def test_a_fault_that_could_take_every_replica_of_a_volume_under_fio_is_refused() -> None:
    m = Model(objects={"v1": Obj("v1", "volume", 2, 32, granted=True, fio=True)}, faults={"s1": "cut"})
    assert "lose every replica" in str(why_invalid(m, Action(1, "kill", "s2"), FIVE, allow_second=True))
    m.objects["v1"].replicas = 3
    assert why_invalid(m, Action(1, "kill", "s2"), FIVE, allow_second=True) is None


def test_check_args_names_the_field_at_fault() -> None:
    assert check_args(3, 5, None, "cut,kill", 1.0) == (3, 5, None, ("cut", "kill"), 1.0)
    assert check_args(3, 5, 10, "none", 2.0)[3] == ()
    for args, field in [
        ((-1, 5, None, "cut", 1.0), "seed"),
        ((1, 0, None, "cut", 1.0), "minutes"),
        ((1, float("nan"), None, "cut", 1.0), "minutes"),
        ((1, 5, 0, "cut", 1.0), "steps"),
        ((1, 5, None, "cut,fire", 1.0), "faults"),
        ((1, 5, None, "cut,cut", 1.0), "faults"),
        ((1, 5, None, "cut", 0.0), "bound_scale"),
    ]:
        with pytest.raises(BadInput) as e:
            check_args(*args)  # type: ignore[arg-type]
        assert e.value.field == field


def test_a_shape_without_a_gpu_node_or_storage_is_bad_input() -> None:
    with pytest.raises(BadInput, match="GPU-node"):
        Shape(("s1",), (), 512)
    with pytest.raises(BadInput, match="storage"):
        Shape((), ("h1",), 512)


def test_the_cli_dry_run_prints_the_plan_and_bad_input_exits_2_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nodeos_devtools.lab import cli

    def run(*argv: str) -> int:
        monkeypatch.setattr(sys, "argv", ["nodeos-lab", *argv])
        try:
            cli.main()
        except SystemExit as e:
            return int(e.code or 0)
        return 0

    assert run("soak", "--seed", "4", "--minutes", "1", "--dry-run", "--steps", "5", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert [a["step"] for a in out[:5]] == [1, 2, 3, 4, 5]
    assert run("soak", "--seed", "4", "--minutes", "-3") == 2
    assert "[field: minutes]" in capsys.readouterr().err
    assert run("soak", "--seed", "4", "--minutes", "3", "--faults", "flood") == 2
    assert "[field: faults]" in capsys.readouterr().err
    assert run("soak", "--minutes", "3") == 2
    assert run("soak", "--seed", "4", "--minutes", "3", "--lab", "nosuchlab-zz") == 2
    assert "[field: lab]" in capsys.readouterr().err
