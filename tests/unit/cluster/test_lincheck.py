"""The linearizability checker: known verdicts, unseen generated histories, formats, bad input."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeos.cluster.lincheck import LINEARIZABLE, NOT_LINEARIZABLE, UNKNOWN_VERDICT, check_text
from nodeos.cluster.lincheck.record import HistoryRecorder
from nodeos.errors import BadInput


def _verdicts(shared: Path) -> dict[str, str]:
    path = shared / "linearizability" / "jepsen-etcd" / "VERDICTS"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            name, verdict = line.split()
            out[name] = verdict
    return out


def test_agrees_with_every_jepsen_etcd_verdict(shared_dir: Path) -> None:
    verdicts = _verdicts(shared_dir)
    assert len(verdicts) >= 50
    got = {
        name: check_text(
            "register", (shared_dir / "linearizability" / "jepsen-etcd" / name).read_text()
        ).verdict
        for name in verdicts
    }
    assert got == verdicts


def test_agrees_with_every_kv_verdict(shared_dir: Path) -> None:
    kv_dir = shared_dir / "linearizability" / "kv"
    files = sorted(kv_dir.glob("*.txt"))
    if not files:
        pytest.skip(f"no histories in {kv_dir}")
    for path in files:
        expected = LINEARIZABLE if path.name.endswith("-ok.txt") else NOT_LINEARIZABLE
        assert check_text("kv", path.read_text()).verdict == expected, path.name


# --- histories never seen before: produced by a real sequential object ----------------------


def generate(
    seed: int, model: str, procs: int, nops: int, keys: int, p_unknown: float
) -> list[dict[str, Any]]:
    """Run random operations against a real dict, with random overlap of invocation, effect
    and completion, and return the events in real-time order (our JSON-lines format)."""
    rng = random.Random(seed)
    store: dict[str, Any] = {}
    init = None if model == "register" else ""
    events: list[dict[str, Any]] = []
    phase: dict[int, tuple[str, dict[str, Any], Any]] = {}  # process -> (phase, op, output)
    issued = 0
    next_proc = procs
    active = list(range(procs))

    def apply(op: dict[str, Any]) -> Any:
        k, f, v = op["key"], op["f"], op["value"]
        cur = store.get(k, init)
        if f in ("read", "get"):
            return cur
        if f in ("write", "put"):
            store[k] = v
            return None
        if f == "append":
            store[k] = cur + v
            return None
        if cur == v[0]:
            store[k] = v[1]
            return True
        return False

    while issued < nops or phase:
        p = rng.choice(active)
        if p not in phase:
            if issued >= nops:
                continue
            issued += 1
            key = f"k{rng.randrange(keys)}"
            if model == "register":
                f = rng.choice(["read", "write", "cas"])
                value: Any = {
                    "read": None,
                    "write": rng.randrange(5),
                    "cas": [rng.randrange(5), rng.randrange(5)],
                }[f]
            else:
                f = rng.choice(["get", "put", "append"])
                value = None if f == "get" else f"x{issued}."
            op = {"process": p, "f": f, "key": key, "value": value}
            events.append({**op, "type": "invoke"})
            phase[p] = ("invoked", op, None)
        elif phase[p][0] == "invoked":
            op = phase[p][1]
            if rng.random() < p_unknown:
                # The client gives up: the op may or may not take effect; the process is replaced.
                if rng.random() < 0.5:
                    apply(op)
                events.append({**op, "type": "info"})
                del phase[p]
                active[active.index(p)] = next_proc
                next_proc += 1
            else:
                phase[p] = ("applied", op, apply(op))
        else:
            _, op, output = phase.pop(p)
            done = dict(op)
            if op["f"] in ("read", "get"):
                done["value"] = output
            done["type"] = "fail" if output is False else "ok"
            events.append(done)
    return events


def to_text(events: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


params = st.tuples(
    st.integers(0, 2**32),
    st.sampled_from(["register", "kv"]),
    st.integers(1, 5),
    st.integers(1, 40),
    st.integers(1, 3),
    st.sampled_from([0.0, 0.1, 0.25]),
)


@settings(max_examples=80, deadline=None)
@given(params)
def test_generated_histories_are_linearizable(p: tuple[int, str, int, int, int, float]) -> None:
    seed, model, procs, nops, keys, p_unknown = p
    events = generate(seed, model, procs, nops, keys, p_unknown)
    assert check_text(model, to_text(events), timeout=60).verdict == LINEARIZABLE


@settings(max_examples=80, deadline=None)
@given(params)
def test_impossible_read_value_is_not_linearizable(p: tuple[int, str, int, int, int, float]) -> None:
    seed, model, procs, nops, keys, p_unknown = p
    events = generate(seed, model, procs, nops, keys, p_unknown)
    reads = [e for e in events if e["type"] == "ok" and e["f"] in ("read", "get")]
    if not reads:
        return
    victim = random.Random(seed).choice(reads)
    victim["value"] = 1000 if model == "register" else "never-written"
    assert check_text(model, to_text(events), timeout=60).verdict == NOT_LINEARIZABLE


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from(["register", "kv"]), st.integers(2, 30))
def test_sequential_history_with_any_changed_read_is_not_linearizable(
    seed: int, model: str, nops: int
) -> None:
    # One process, no unknown outcomes: the only linearization is the real order, so a read
    # answering anything but the current value (even a value written elsewhere) is wrong.
    events = generate(seed, model, 1, nops, 2, 0.0)
    reads = [e for e in events if e["type"] == "ok" and e["f"] in ("read", "get")]
    if not reads:
        return
    victim = random.Random(seed).choice(reads)
    written = {e["value"] for e in events if e["f"] in ("write", "put")} | {
        None if model == "register" else ""
    }
    others = [v for v in written if v != victim["value"]] or ["other"]
    victim["value"] = random.Random(seed + 1).choice(sorted(others, key=repr))
    assert check_text(model, to_text(events)).verdict == NOT_LINEARIZABLE


# --- specific behaviours --------------------------------------------------------------------


def test_unknown_write_may_take_effect_later_or_never() -> None:
    base = [
        {"process": 0, "type": "invoke", "f": "write", "key": "a", "value": 1},
        {"process": 0, "type": "info", "f": "write", "key": "a", "value": 1},
        {"process": 1, "type": "invoke", "f": "read", "key": "a", "value": None},
        {"process": 1, "type": "ok", "f": "read", "key": "a", "value": None},
        {"process": 1, "type": "invoke", "f": "read", "key": "a", "value": None},
        {"process": 1, "type": "ok", "f": "read", "key": "a", "value": 1},
    ]
    assert check_text("register", to_text(base)).verdict == LINEARIZABLE
    # ...but once it was seen, the old value cannot come back.
    back = [
        *base,
        {"process": 1, "type": "invoke", "f": "read", "key": "a", "value": None},
        {"process": 1, "type": "ok", "f": "read", "key": "a", "value": None},
    ]
    assert check_text("register", to_text(back)).verdict == NOT_LINEARIZABLE


def test_failed_cas_means_value_differed() -> None:
    events = [
        {"process": 0, "type": "invoke", "f": "write", "key": "a", "value": 1},
        {"process": 0, "type": "ok", "f": "write", "key": "a", "value": 1},
        {"process": 0, "type": "invoke", "f": "cas", "key": "a", "value": [1, 2]},
        {"process": 0, "type": "fail", "f": "cas", "key": "a", "value": [1, 2]},
    ]
    assert check_text("register", to_text(events)).verdict == NOT_LINEARIZABLE


def test_keys_are_checked_independently() -> None:
    events = [
        {"process": 0, "type": "invoke", "f": "write", "key": "a", "value": 1},
        {"process": 0, "type": "ok", "f": "write", "key": "a", "value": 1},
        {"process": 0, "type": "invoke", "f": "read", "key": "b", "value": None},
        {"process": 0, "type": "ok", "f": "read", "key": "b", "value": None},
    ]
    assert check_text("register", to_text(events)).verdict == LINEARIZABLE


def test_timeout_gives_unknown_not_a_guess() -> None:
    # Many concurrent unknown writes and no reads to prune the search: exponential, so a tiny
    # budget cannot finish.
    events = []
    for p in range(60):
        events.append({"process": p, "type": "invoke", "f": "write", "key": "a", "value": p})
    events.append({"process": 999, "type": "invoke", "f": "read", "key": "a", "value": None})
    events.append({"process": 999, "type": "ok", "f": "read", "key": "a", "value": 12345})
    result = check_text("register", to_text(events), timeout=0.05)
    assert result.verdict == UNKNOWN_VERDICT


def test_recorder_writes_a_checkable_history(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryRecorder(path) as rec:
        rec.invoke(0, "write", "k", 3)
        rec.invoke(1, "read", "k")
        rec.ok(0, "write", "k", 3)
        rec.ok(1, "read", "k", 3)
        rec.invoke(1, "cas", "k", [3, 4])
        rec.info(1, "cas", "k", [3, 4])
        rec.invoke(0, "read", "k")
        rec.ok(0, "read", "k", 4)
    assert check_text("register", path.read_text()).verdict == LINEARIZABLE


@pytest.mark.parametrize(
    ("model", "text", "line"),
    [
        (
            "register",
            "INFO  jepsen.util - 0\t:invoke\t:read\tnil\nINFO  jepsen.util - 0\t:ok\t:read\tbanana\n",
            2,
        ),
        ("register", "INFO  jepsen.util - 0\t:invoke\t:read\tnil\ngarbage\n", 2),
        (
            "register",
            '{"process": 0, "type": "invoke", "f": "write", "key": "a", "value": 1}\n{"process": 0,\n',
            2,
        ),
        ("register", '{"process": 0, "type": "ok", "f": "write", "key": "a", "value": 1}\n', 1),
        ("register", '{"process": 0, "type": "invoke", "f": "append", "key": "a", "value": 1}\n', 1),
        ("kv", '{:process 0, :type :invoke, :f :get, :key "a", :value nil}\n{:process 0 :type}\n', 2),
        ("kv", "hello\n", 1),
    ],
)
def test_malformed_history_names_the_line(model: str, text: str, line: int) -> None:
    with pytest.raises(BadInput) as exc:
        check_text(model, text)
    assert exc.value.field == f"line {line}"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeos.cluster.lincheck.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_exit_codes(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(to_text(generate(7, "register", 3, 20, 2, 0.1)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        to_text(
            [
                {"process": 0, "type": "invoke", "f": "read", "key": "a", "value": None},
                {"process": 0, "type": "ok", "f": "read", "key": "a", "value": 5},
            ]
        )
    )
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"process": 0, "type": "invoke", "f": "read"}\nnot json\n')
    r = _cli("--model", "register", str(good))
    assert (r.returncode, r.stdout.strip()) == (0, LINEARIZABLE)
    r = _cli("--model", "register", str(bad))
    assert (r.returncode, r.stdout.strip()) == (1, NOT_LINEARIZABLE)
    r = _cli("--model", "register", str(broken))
    assert r.returncode == 2 and "line 2" in r.stderr
    r = _cli("--model", "queue", str(good))
    assert r.returncode == 2 and "register" in r.stderr


def test_aborted_cas_is_not_a_failed_comparison() -> None:
    # A cas refused before it ran (e.g. no leader) says nothing about the value.
    events = [
        {"process": 0, "type": "invoke", "f": "write", "key": "a", "value": 1},
        {"process": 0, "type": "ok", "f": "write", "key": "a", "value": 1},
        {"process": 0, "type": "invoke", "f": "cas", "key": "a", "value": [1, 2]},
        {"process": 0, "type": "fail", "f": "cas", "key": "a", "value": [1, 2], "error": "not_leader"},
        {"process": 0, "type": "invoke", "f": "read", "key": "a", "value": None},
        {"process": 0, "type": "ok", "f": "read", "key": "a", "value": 1},
    ]
    assert check_text("register", to_text(events)).verdict == LINEARIZABLE
