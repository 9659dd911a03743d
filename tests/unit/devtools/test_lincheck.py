"""The linearizability checker: known verdicts, unseen generated histories, formats, bad input."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeos.errors import BadInput
from nodeos_devtools.lincheck import LINEARIZABLE, NOT_LINEARIZABLE, UNKNOWN_VERDICT, check_text
from nodeos_devtools.lincheck.record import HistoryRecorder


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
    # budget cannot finish. The read's value is written, but only after it returned: no
    # shortcut refutes it, only the search.
    events = []
    for p in range(60):
        events.append({"process": p, "type": "invoke", "f": "write", "key": "a", "value": p})
    events.append({"process": 999, "type": "invoke", "f": "read", "key": "a", "value": None})
    events.append({"process": 999, "type": "ok", "f": "read", "key": "a", "value": 12345})
    events.append({"process": 998, "type": "invoke", "f": "write", "key": "a", "value": 12345})
    result = check_text("register", to_text(events), timeout=0.05)
    assert result.verdict == UNKNOWN_VERDICT


@pytest.mark.parametrize(
    ("model", "writes", "read", "verdict"),
    [
        ("kv", [("put", "ab"), ("append", "c")], "abcc", LINEARIZABLE),
        ("kv", [("put", "ab"), ("append", "c")], "abd", NOT_LINEARIZABLE),
        ("register", [("write", 1), ("cas", [1, 2])], 3, NOT_LINEARIZABLE),
    ],
)
def test_a_read_no_write_could_produce_is_refuted_at_once_however_many_unknowns(
    model: str, writes: list[tuple[str, Any]], read: Any, verdict: str
) -> None:
    # 40 writes with unknown outcomes make the search itself exponential; a read of a value
    # no write can build must still be refuted within a tiny budget, naming the read.
    f_read = "get" if model == "kv" else "read"
    events = []
    for p in range(40):
        f, v = writes[p % len(writes)]
        events.append({"process": p, "type": "invoke", "f": f, "key": "a", "value": v})
    events.append({"process": 999, "type": "invoke", "f": f_read, "key": "a", "value": None})
    events.append({"process": 999, "type": "ok", "f": f_read, "key": "a", "value": read})
    result = check_text(model, to_text(events), timeout=0.05)
    if verdict == NOT_LINEARIZABLE:
        assert result.verdict == NOT_LINEARIZABLE
        assert repr(read) in result.detail and "999" in result.detail
    else:
        assert result.verdict == LINEARIZABLE  # put, append, append, get: the search finds it


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
        [sys.executable, "-m", "nodeos_devtools.lincheck.cli", *args],
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


# --- Jepsen's space-separated logs, budgets per key, bounded memory --------------------------


def test_jepsen_fields_separated_by_spaces_are_read() -> None:
    tabs = (
        "INFO  jepsen.util - 0\t:invoke\t:write\t3\n"
        "INFO  jepsen.util - 0\t:ok\t:write\t3\n"
        "INFO  jepsen.util - 1\t:invoke\t:cas\t[3 4]\n"
        "INFO  jepsen.util - 1\t:ok\t:cas\t[3 4]\n"
        "INFO  jepsen.util - 2\t:invoke\t:read\tnil\n"
        "INFO  jepsen.util - 2\t:ok\t:read\t{}\n"
    )
    spaces = tabs.replace("\t", "  ")
    assert check_text("register", spaces.format(4)).verdict == LINEARIZABLE
    assert check_text("register", spaces.format(3)).verdict == NOT_LINEARIZABLE
    assert check_text("register", tabs.format(3)).verdict == NOT_LINEARIZABLE


def test_jepsen_etcd_logs_with_spaces_get_the_same_verdicts(shared_dir: Path) -> None:
    verdicts = _verdicts(shared_dir)
    for name in sorted(verdicts)[:4]:
        text = (shared_dir / "linearizability" / "jepsen-etcd" / name).read_text().replace("\t", " ")
        assert check_text("register", text).verdict == verdicts[name], name


def _hard_key_events(key: str, writers: int) -> list[dict[str, Any]]:
    """Many concurrent appends of unknown outcome and a read none of their orders explains:
    the search has to try (nearly) every subset and order before it can say no. (The read is
    built of append values, so no shortcut refutes it: only one append writes "<1>".)"""
    events = [
        {"process": p, "type": "invoke", "f": "append", "key": key, "value": f"<{p}>"} for p in range(writers)
    ]
    events.append({"process": 999, "type": "invoke", "f": "get", "key": key, "value": None})
    events.append({"process": 999, "type": "ok", "f": "get", "key": key, "value": "<1><1>"})
    return events


def test_small_violation_is_found_behind_a_huge_key_in_bounded_memory() -> None:
    # The shape of Jepsen's 50-client key-value history: the first key in the file needs an
    # exponential search, a later small one is plainly not linearizable.
    events = _hard_key_events("big", 50)
    events += [
        {"process": 1000, "type": "invoke", "f": "put", "key": "small", "value": "a"},
        {"process": 1000, "type": "ok", "f": "put", "key": "small", "value": "a"},
        {"process": 1000, "type": "invoke", "f": "get", "key": "small", "value": None},
        {"process": 1000, "type": "ok", "f": "get", "key": "small", "value": "b"},
    ]
    result = check_text("kv", to_text(events), max_states=200_000)
    assert result.verdict == NOT_LINEARIZABLE
    assert result.failed_key == "small"
    assert "big" not in result.per_key  # stopped at the first violation


def test_each_key_has_its_own_budget_and_a_spent_one_is_unknown() -> None:
    events = _hard_key_events("big", 40)
    events += [
        {"process": 1000, "type": "invoke", "f": "put", "key": "zsmall", "value": "a"},
        {"process": 1000, "type": "ok", "f": "put", "key": "zsmall", "value": "a"},
    ]
    result = check_text("kv", to_text(events), max_states=20_000)
    assert result.verdict == UNKNOWN_VERDICT
    assert result.per_key == {"zsmall": LINEARIZABLE, "big": UNKNOWN_VERDICT}
    assert "key 'big' (41 operations) used its budget of 20000 states" in result.detail
    # A time budget is per key too: the hard key spending its own leaves the others theirs.
    timed = check_text("kv", to_text(events), timeout=0.2)
    assert timed.per_key == {"zsmall": LINEARIZABLE, "big": UNKNOWN_VERDICT}


def test_ok_read_without_a_value_is_an_error_not_a_read_of_null() -> None:
    events = [
        {"process": 0, "type": "invoke", "f": "read", "key": "a", "value": None},
        {"process": 0, "type": "ok", "f": "read", "key": "a"},
    ]
    with pytest.raises(BadInput) as exc:
        check_text("register", to_text(events))
    assert exc.value.field == "line 2" and "must carry the value it read" in exc.value.message
    events[1]["value"] = None  # an explicit null is a read of the empty register
    assert check_text("register", to_text(events)).verdict == LINEARIZABLE


MALFORMED = [
    # (model, text, line): each used to end in a traceback and exit 1 ("not linearizable")
    ("register", "INFO  jepsen.util - 0\t:invoke\t:cas\t:timed-out\n", 1),
    ("register", '{"process": [0], "type": "invoke", "f": "write", "key": "a", "value": 1}\n', 1),
    ("register", '{"process": 0, "type": "invoke", "f": "write", "key": {"k": 1}, "value": 1}\n', 1),
    ("register", '{"process": 0, "type": "invoke", "f": "write", "key": "a", "value": {"v": 1}}\n', 1),
    ("kv", '{"process": 0, "type": "invoke", "f": "append", "key": "a"}\n', 1),
    ("kv", '{:process 0, :type :invoke, :f :put, :key "a", :value 7}\n', 1),
    ("kv", '{:process 0, :type :invoke, :f :get, :key "\\q", :value nil}\n', 1),
    ("kv", "{:process 0, :type :invoke, :f :get, :key {{:a 1} 2}, :value nil}\n", 1),
    ("kv", "{:process 0, :type :invoke, :f :get, :key " + "[" * 5000 + "\n", 1),
    (
        "register",
        '{"process": 0, "type": "invoke", "f": "write", "key": "a", "value": ' + "[" * 100000 + "\n",
        1,
    ),
]


@pytest.mark.parametrize(("model", "text", "line"), MALFORMED)
def test_malformed_input_is_a_clear_error_with_exit_2(
    tmp_path: Path, model: str, text: str, line: int
) -> None:
    path = tmp_path / "h.txt"
    path.write_text(text)
    r = _cli("--model", model, str(path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and f"line {line}" in r.stderr, r.stderr


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "process": st.one_of(
                    st.integers(0, 3), st.text(max_size=2), st.none(), st.lists(st.integers())
                ),
                "type": st.sampled_from(["invoke", "ok", "fail", "info", "bogus"]),
                "f": st.sampled_from(["read", "write", "cas", "get", "put", "append"]),
                "key": st.one_of(
                    st.sampled_from(["a", "b"]), st.integers(0, 2), st.none(), st.lists(st.none())
                ),
            },
            optional={
                "value": st.recursive(
                    st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.text(max_size=3)),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
                    max_leaves=4,
                ),
                "error": st.sampled_from([None, "x"]),
            },
        ),
        max_size=8,
    ),
    st.sampled_from(["register", "kv"]),
)
def test_any_json_history_gives_a_verdict_or_bad_input(events: list[dict[str, Any]], model: str) -> None:
    try:
        result = check_text(model, to_text(events), max_states=10_000)
    except BadInput as err:
        assert err.field.startswith("line ")
    else:
        assert result.verdict in (LINEARIZABLE, NOT_LINEARIZABLE, UNKNOWN_VERDICT)


# --- the reference checker's own test suite ---------------------------------------------------


def _porcupine_dir() -> Path:
    """A checkout of github.com/anishathalye/porcupine named by NODEOS_PORCUPINE_DIR, read in place."""
    d = os.environ.get("NODEOS_PORCUPINE_DIR")
    if not d or not (Path(d) / "porcupine_test.go").is_file():
        pytest.skip(
            "NODEOS_PORCUPINE_DIR does not name a porcupine checkout (its test data is not ours to copy)"
        )
    return Path(d)


def test_decides_every_history_porcupine_decides_in_its_own_tests() -> None:
    root = _porcupine_dir()
    go = (root / "porcupine_test.go").read_text()
    etcd = {int(n): v == "true" for n, v in re.findall(r"checkJepsen\(t, (\d+), (true|false)\)", go)}
    kv = {n: v == "true" for n, v in re.findall(r'checkKv\(t, "([\w-]+)", (true|false), true\)', go)}
    assert len(etcd) > 100 and {"c50-ok", "c50-bad"} <= set(kv)
    for n, ok in sorted(etcd.items()):
        text = (root / "test_data" / "jepsen" / f"etcd_{n:03d}.log").read_text()
        assert check_text("register", text).verdict == (LINEARIZABLE if ok else NOT_LINEARIZABLE), n
    for name, ok in sorted(kv.items()):
        text = (root / "test_data" / "kv" / f"{name}.txt").read_text()
        assert check_text("kv", text).verdict == (LINEARIZABLE if ok else NOT_LINEARIZABLE), name
