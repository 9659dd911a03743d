"""Histories: operations with invocation/completion positions, and the parsers that build them.

Three file formats are read, each one event per line, in real-time order:

- the Jepsen register log (`INFO  jepsen.util - <process>\\t:<type>\\t:<f>\\t<value>`; the
  fields may be separated by any run of tabs or spaces, as Jepsen's own logs are),
- the Jepsen key-value EDN maps (`{:process 0, :type :invoke, :f :append, :key "0", :value "x"}`),
- our own JSON lines (`{"process": 0, "type": "invoke", "f": "write", "key": "k", "value": 3}`),
  written by the cluster's test clients; `f` is one of the model's functions, `type` one of
  invoke/ok/fail/info, `value` of a cas is `[from, to]` and of an ok read the value read;
  a `fail` carrying an `error` field means the operation never ran (even a cas).

Outcome rules (as in ../shared/linearizability/README.md): `ok` completes an operation; a
`fail` of a cas means the value was not `from`; any other `fail` means the operation did not
take effect and it is dropped; `info`, and an invocation still open at the end (or when the
same process invokes again), leave the outcome unknown: the operation may take effect at any
time after its invocation, or never. A read with an unknown result constrains nothing and is
dropped. A completion whose value is `:timed-out` is an `info`: the outcome is unknown.

Every value is checked against the model before the search (an `ok` read must say what it
read: a missing value is an error, not a read of null), so malformed input is a BadInput
naming its line, never a traceback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nodeos.errors import BadInput


class _Unknown:
    """Marker for an outcome the history does not know."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()
TYPES = ("invoke", "ok", "fail", "info")
READS = frozenset({"read", "get"})
VALUE_OUTPUT = READS  # operations whose ok completion carries the value observed


@dataclass
class Op:
    """One operation. `call`/`ret` are event positions; `ret` None means unknown outcome."""

    process: Any
    f: str
    key: Any
    value: Any
    call: int
    ret: int | None = None
    output: Any = UNKNOWN


def history_error(line_no: int, message: str) -> BadInput:
    return BadInput(f"line {line_no}: {message}", field=f"line {line_no}")


@dataclass(frozen=True)
class Event:
    line: int
    process: Any
    type: str
    f: str
    key: Any
    value: Any
    aborted: bool = False  # a `fail` that says the op never ran (even a cas)
    has_value: bool = True  # False: the line had no value field at all


_SCALARS = (int, str, type(None))
STRING_VALUED = frozenset({"get", "put", "append"})  # the key-value model's values are strings


def _check_value(ev: Event) -> None:
    """Raise a BadInput naming the line when the event's value cannot mean what its f says."""
    if isinstance(ev.process, bool) or not isinstance(ev.process, int | str):
        raise history_error(ev.line, f"process must be an integer or a string, got {ev.process!r}")
    if isinstance(ev.key, bool) or not isinstance(ev.key, _SCALARS):
        raise history_error(ev.line, f"key must be a string, an integer or null, got {ev.key!r}")
    v = ev.value
    if v is UNKNOWN:
        if ev.type == "invoke":
            raise history_error(ev.line, "an invocation cannot have a timed-out value")
        return
    if ev.type == "ok" and ev.f in READS and not ev.has_value:
        raise history_error(ev.line, f"an ok {ev.f} must carry the value it read (null: an empty register)")
    reads_value = ev.type == "ok" and ev.f in READS
    if ev.f in READS and not reads_value:
        return  # an invocation's or failure's value is not used
    if ev.f == "cas":
        compared = ev.type in ("invoke", "ok") or (ev.type == "fail" and not ev.aborted)
        pair = isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, _SCALARS) for x in v)
        if compared and not pair:
            raise history_error(ev.line, f"a cas value must be [from, to] of integers or strings, got {v!r}")
        return
    if ev.f in STRING_VALUED:
        if not isinstance(v, str) and (ev.type == "invoke" or reads_value):
            raise history_error(ev.line, f"a {ev.f} value must be a string, got {v!r}")
        return
    if not isinstance(v, _SCALARS) or isinstance(v, bool):
        raise history_error(ev.line, f"a {ev.f} value must be an integer, a string or null, got {v!r}")


def build_ops(events: Iterable[Event], functions: frozenset[str]) -> list[Op]:
    """Pair invocations with completions per process and apply the outcome rules."""
    ops: list[Op] = []
    open_ops: dict[Any, Op] = {}
    pos = 0
    for ev in events:
        pos += 1
        if ev.f not in functions:
            raise history_error(ev.line, f"unknown function {ev.f!r}; allowed: {sorted(functions)}")
        _check_value(ev)
        if ev.type == "invoke":
            # A process that invokes again gave up on its previous operation: outcome unknown.
            open_ops.pop(ev.process, None)
            op = Op(ev.process, ev.f, ev.key, ev.value, call=pos)
            open_ops[ev.process] = op
            ops.append(op)
            continue
        op = open_ops.pop(ev.process, None)
        if op is None:
            raise history_error(ev.line, f"{ev.type} for process {ev.process!r} which has no open invocation")
        if op.f != ev.f or op.key != ev.key:
            raise history_error(
                ev.line, f"completion {ev.f} {ev.key!r} does not match the invocation {op.f} {op.key!r}"
            )
        if ev.value is UNKNOWN:
            continue  # timed out: the outcome stays unknown, as for info
        if ev.type == "ok":
            op.ret = pos
            op.output = ev.value if ev.f in VALUE_OUTPUT else (True if ev.f == "cas" else None)
        elif ev.type == "fail":
            if ev.f == "cas" and not ev.aborted:
                op.ret = pos
                op.output = False
            else:
                op.output = None
                op.f = "_dropped"
        # info: stays unknown (ret None)
    return [op for op in ops if op.f != "_dropped" and not (op.ret is None and op.f in READS)]


# --- Jepsen register log ---------------------------------------------------------------

# Fields separated by tabs (knossos' logs) or spaces (Jepsen's console): both are Jepsen output.
_JEPSEN = re.compile(r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:([\w-]+)\s+:([\w-]+)\s+(.*)$")


def _jepsen_value(text: str, line: int) -> Any:
    text = text.strip()
    if text == "nil":
        return None
    if text == ":timed-out":
        return UNKNOWN
    if text.startswith("[") and text.endswith("]"):
        parts = text[1:-1].split()
        if len(parts) != 2:
            raise history_error(line, f"a cas value must be [from to], got {text!r}")
        return tuple(_jepsen_value(p, line) for p in parts)
    try:
        return int(text)
    except ValueError:
        raise history_error(line, f"value {text!r} is not nil, an integer or [from to]") from None


def parse_jepsen(lines: list[str]) -> list[Event]:
    events = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        m = _JEPSEN.match(raw.rstrip("\n"))
        if m is None:
            raise history_error(
                n, "not a Jepsen register line 'INFO  jepsen.util - <p> :<type> :<f> <value>'"
            )
        proc, typ, f, value = int(m.group(1)), m.group(2), m.group(3), _jepsen_value(m.group(4), n)
        if typ not in TYPES:
            raise history_error(n, f"type :{typ} is not one of {list(TYPES)}")
        if f == "cas" and value is not UNKNOWN and not isinstance(value, tuple):
            raise history_error(n, "a cas value must be [from to]")
        events.append(Event(n, proc, typ, f, None, value))
    return events


# --- EDN (the subset Jepsen writes) -----------------------------------------------------

_EDN_TOKEN = re.compile(r'\s*(?:([{}\[\]])|"((?:[^"\\]|\\.)*)"|([^\s,{}\[\]"]+))\s*,?')


class Keyword(str):
    """An EDN keyword such as :ok (stored without the colon)."""


def parse_edn(text: str, line: int) -> Any:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _EDN_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise history_error(line, f"cannot read EDN at column {pos + 1}")
        pos = m.end()
        if m.group(1):
            tokens.append(("p", m.group(1)))
        elif m.group(2) is not None:
            try:
                tokens.append(("s", json.loads('"' + m.group(2) + '"')))
            except json.JSONDecodeError:
                raise history_error(line, f"bad escape in the string at column {pos + 1}") from None
        else:
            tokens.append(("a", m.group(3)))
    value, rest = _edn_value(tokens, 0, line)
    if rest != len(tokens):
        raise history_error(line, "trailing text after the EDN value")
    return value


_MAX_DEPTH = 8  # Jepsen lines nest two deep; deeper input is refused, not recursed into


def _edn_value(tokens: list[tuple[str, str]], i: int, line: int, depth: int = 0) -> tuple[Any, int]:
    if depth > _MAX_DEPTH:
        raise history_error(line, f"EDN nested deeper than {_MAX_DEPTH} levels")
    if i >= len(tokens):
        raise history_error(line, "EDN value ends early")
    kind, tok = tokens[i]
    if kind == "s":
        return tok, i + 1
    if kind == "p":
        if tok in "{[":
            close = "}" if tok == "{" else "]"
            items = []
            i += 1
            while i < len(tokens) and tokens[i] != ("p", close):
                item, i = _edn_value(tokens, i, line, depth + 1)
                items.append(item)
            if i >= len(tokens):
                raise history_error(line, f"missing {close!r}")
            if tok == "[":
                return tuple(items), i + 1
            if len(items) % 2:
                raise history_error(line, "an EDN map needs an even number of forms")
            if any(isinstance(k, dict | tuple) for k in items[::2]):
                raise history_error(line, "an EDN map key must be a keyword, string or number")
            return dict(zip(items[::2], items[1::2], strict=True)), i + 1
        raise history_error(line, f"unexpected {tok!r}")
    if tok == "nil":
        return None, i + 1
    if tok in ("true", "false"):
        return tok == "true", i + 1
    if tok.startswith(":"):
        return Keyword(tok[1:]), i + 1
    try:
        return int(tok), i + 1
    except ValueError:
        raise history_error(line, f"unsupported EDN atom {tok!r}") from None


def parse_kv_edn(lines: list[str]) -> list[Event]:
    events = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        m = parse_edn(raw, n)
        if not isinstance(m, dict):
            raise history_error(n, "each line must be an EDN map")
        events.append(_event_from_map({str(k): v for k, v in m.items()}, n))
    return events


# --- our own JSON lines ------------------------------------------------------------------


def parse_jsonl(lines: list[str]) -> list[Event]:
    events = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            m = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise history_error(n, f"not valid JSON: {exc.msg}") from None
        except RecursionError:
            raise history_error(n, "JSON nested too deeply") from None
        if not isinstance(m, dict):
            raise history_error(n, "each line must be a JSON object")
        events.append(_event_from_map(m, n))
    return events


def _event_from_map(m: dict[str, Any], n: int) -> Event:
    for field in ("process", "type", "f"):
        if field not in m:
            raise history_error(n, f"missing field {field!r}")
    typ, f = str(m["type"]), str(m["f"])
    if typ not in TYPES:
        raise history_error(n, f"type {typ!r} is not one of {list(TYPES)}")
    value = m.get("value")
    if isinstance(value, list):
        value = tuple(value)
    if f == "cas" and typ in ("invoke", "ok") and not (isinstance(value, tuple) and len(value) == 2):
        raise history_error(n, "a cas value must be [from, to]")
    aborted = m.get("error") is not None
    return Event(n, m["process"], typ, f, m.get("key"), value, aborted=aborted, has_value="value" in m)


def detect_format(lines: list[str]) -> str:
    for raw in lines:
        s = raw.lstrip()
        if not s:
            continue
        if s.startswith("INFO"):
            return "jepsen"
        if s.startswith("{:"):
            return "edn"
        if s.startswith("{"):
            return "jsonl"
        break
    return "unknown"


def parse_history(text: str, functions: frozenset[str]) -> list[Op]:
    lines = text.splitlines()
    if not any(raw.strip() for raw in lines):
        return []  # an empty history is trivially linearizable
    fmt = detect_format(lines)
    if fmt == "jepsen":
        events = parse_jepsen(lines)
    elif fmt == "edn":
        events = parse_kv_edn(lines)
    elif fmt == "jsonl":
        events = parse_jsonl(lines)
    else:
        first = next((i for i, raw in enumerate(lines, 1) if raw.strip()), 1)
        raise history_error(
            first, "unrecognised history format (expected a Jepsen log, EDN maps or JSON lines)"
        )
    return build_ops(events, functions)
