"""docs/api.md, made from the definitions: `python -m nodeos.api.reference` writes it,
`--check` says whether the committed file is current (tests/unit/api/test_reference.py)."""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import msgspec

from .check import unwrap
from .openapi import BASE, HTTP_STATUS, takes_get
from .registry import API_VERSION, METHODS
from .spec import Method

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _statuses() -> str:
    by: dict[int, list[str]] = {}
    for code, status in HTTP_STATUS.items():
        by.setdefault(status, []).append(f"`{code}`")
    return "; ".join(f"{s} {', '.join(codes)}" for s, codes in sorted(by.items()))


INTRO = f"""# The nodeosd API (version {API_VERSION})

Generated from `nodeos/api/` by `python -m nodeos.api.reference`; do not edit by hand (a test
compares this file with the definitions).

Every public method of `nodeosd` is defined once, in `nodeos/api/` (`fleet.py`: this node, hosts,
nodes, events; `storage.py`: drives, pools, volumes; `cluster.py`: the Raft cluster): its name,
typed request (a `msgspec.Struct`) and reply, the errors it may return, where it runs and the
version that introduced it. The daemon's dispatcher checks every request against its method's
type before the handler runs; the console is a client of the same methods.

**Framing.** A unix socket (root only), frames of a 4-byte big-endian length and a msgpack map.
A request is `{{v: {API_VERSION}, id, method, params}}`; a reply `{{id, result}}` or
`{{id, error: {{code, message, field?, allowed?}}}}`.

**Errors.** One shape everywhere: `code`, a `message` for the operator, the `field` at fault and,
where the type knows them, the `allowed` values. The console exits 2 on `bad_input`,
`not_found`, `already_exists` and `placement_refused` (nothing was changed), 1 on the others.
A method that runs at the leader may also answer `not_leader` (nothing was done: ask again) or
`unknown_outcome` (it may have been applied).

**Where it runs.** *this node*: the node whose socket was asked. *the leader*: forwarded to the
Raft leader (a read after a read barrier, a write as one map command); the node asked waits on
its own copy of the map until the change is done or `wait` runs out.

**Compatibility.** A field a daemon does not know is ignored: an added optional field is compatible.
A changed meaning is a new method or a new version (`since`). A daemon answers clients one version
older. Map commands (`nodeos/cluster/commands.py`, the one list of them) carry the cluster **feature
level** that introduced them (`nodeos/cluster/features.py`: level 1, release 0.1.0; level 2, release
0.2.0: `set_feature_level`, `kv_delete`, a host's TLS PSK derivation: `host_add` v3, `host_update`
v2; level 3, release 0.3.0: a new volume's replica a node failed to make is placed elsewhere,
`volume_create_replace`, `volume_create_fail`; level 4, release 0.4.0: a published copy on a node
that went down before it joined is made elsewhere, `publish_replace`; level 5, release 0.5.0: the
rolling upgrade's record, `upgrade_*`; level 6, release 0.6.0: its `release` step, `upgrade_step`
v2; level 7, release 0.7.0: a planned move applies only while the old primary still reports it
handed off, `volume_failover` v2). A leader proposes each command it decides at the newest version
the cluster's level allows (`features.version_for`). Each member tells the map its
release and the level it knows (`cluster status --json`: `features`). A new cluster starts at the
level its first member knows (`cluster init --feature-level N` starts lower, for a cluster older
releases will join); the cluster's level (`feature_level`) rises only by `nodeos cluster set
feature-level N`, refused (exit 2, naming the member and its release) while any member does not know
N, and is never lowered: raise it at the end of an upgrade, once no node will go back to the older
release. Until then a command above the level is refused before it reaches the Raft log
(`not_supported`, naming the level), so while an older node is a member nothing it cannot apply is
committed. A node whose release knows less than the cluster's level is refused at join (naming the
level). A node that still meets a committed entry it does not know (or a snapshot of a newer map)
never skips it: it stops applying there, keeps its log and its vote, hands over leadership, and says
so (`nodeos status`: health not ok, "cluster map stopped: needs release >= X to apply entry N";
`cluster status`: `features.stalled`; a critical `node_stalled` event in its journal); restarted
with a release that knows it, it applies the log from that entry on. (Releases before 0.2.0 still
skip a command they do not know: the level is what keeps it from them.)
Each map command version has typed arguments (`nodeos/cluster/command_args.py`): checked when
proposed (`bad_input` naming the field, before the Raft log), observed but never refused when
applied, since what a released version's handler accepts at apply is frozen (a log written by an
older release must give every release the same map); a stricter rule is a new version.

**HTTPS REST endpoint.** Off unless `nodeosd --rest-listen HOST:PORT` (or `rest_listen` in the
config file; a management address, never a storage address). TLS with the node's certificate
from the cluster CA (clients trust `<state-dir>/cluster/tls/ca.pem`; the certificate names the
member, not the address) or an operator's (`rest_cert`, `rest_key`). Every method but the test
hooks is `POST {BASE}/<name with dots as slashes>` with its request as a JSON object
(`POST {BASE}/volume/create`, `{{"name": "v1", "size": "10GiB"}}`); one that takes no parameter and
changes nothing answers `GET` too. The OpenAPI 3.1 document is `GET {BASE}/openapi.json`
(`nodeos/api/openapi.py`). Every other request needs `Authorization: Bearer TOKEN`, a token
made with `nodeos auth token create --role admin|read-only` (`--json`: `{{"token": ...}}`),
listed and revoked with `nodeos auth token list|revoke`; the cluster keeps only its hash, and
no token is ever logged. A read-only token may call the methods that change nothing. A reply is
the method's result as JSON (200) or `{{"error": {{code, message, field?, allowed?}}}}` with the
console's code; its status: {_statuses()}.

**Adding a method** (a worked example: `docs/api-howto.md`) touches three files and regenerates
this one: (1) its definition in
`nodeos/api/<area>.py` (request type, reply, errors, where it runs, `since` the current
version, its console command); (2) its handler in the service that owns the area (e.g.
`ControlService.methods()` in `nodeos/control/service.py`), which gets a request already
checked against the type; (3) its console command in `nodeos/cli/`. Then
`python -m nodeos.api.reference` rewrites this file; `tests/unit/api` and
`tests/process/test_api_definitions.py` fail until all of it agrees.
"""

_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def type_text(tp: Any) -> str:
    tp, _check, meta = unwrap(tp)
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        text = "any"
    elif origin is Literal:
        text = "one of " + ", ".join(f"`{a}`" for a in args)
    elif origin in (typing.Union, types.UnionType):
        text = " or ".join(type_text(a) for a in args)
    elif origin is list:
        text = f"list of {type_text(args[0])}" if args else "list"
    elif origin is dict:
        text = f"map of {type_text(args[0])} to {type_text(args[1])}" if args else "map"
    elif isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        text = f"`{tp.__name__}`"
    else:
        text = _NAMES.get(tp, getattr(tp, "__name__", str(tp)))
    return text + _bounds(meta)


def _bounds(meta: msgspec.Meta | None) -> str:
    if meta is None:
        return ""
    parts = [f"{op} {_num(v)}" for op, v in ((">", meta.gt), (">=", meta.ge), ("<", meta.lt), ("<=", meta.le))
             if v is not None]  # fmt: skip
    if meta.min_length is not None or meta.max_length is not None:
        parts.append(
            f"length {meta.min_length or 0}..{meta.max_length if meta.max_length is not None else ''}"
        )
    return f" ({', '.join(parts)})" if parts else ""


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def request_table(m: Method) -> list[str]:
    hints = typing.get_type_hints(m.request, include_extras=True)
    fields = msgspec.structs.fields(m.request)
    if not fields:
        return ["No parameters."]
    rows = ["| field | type | required | default | meaning |", "|---|---|---|---|---|"]
    for f in fields:
        _tp, check, meta = unwrap(hints[f.name])
        required = f.default is msgspec.NODEFAULT and f.default_factory is msgspec.NODEFAULT
        default = "" if required or f.default is None else f"`{f.default!r}`"
        what = (meta.description if meta is not None and meta.description else "") or ""
        if check is not None:
            what += f" (checked by `{check.target}`)"
        rows.append(
            f"| `{f.name}` | {_cell(type_text(hints[f.name]))} | {'yes' if required else 'no'} | "
            f"{default} | {_cell(what.strip())} |"
        )
    return rows


def _route(m: Method) -> str:
    if m.only_with:
        return "not served (a test hook)"
    path = BASE + "/" + m.name.replace(".", "/")
    return (
        f"`POST {path}`"
        + (" (`GET` too)" if takes_get(m) else "")
        + f", {'admin' if m.write else 'any'} token"
    )


def reply_fields(reply: Any) -> list[str]:
    """A typed reply's fields, one line each (views typed as maps are listed by `--json`)."""
    if not (isinstance(reply, type) and issubclass(reply, msgspec.Struct)):
        return []
    hints = typing.get_type_hints(reply, include_extras=True)
    return ["", *(f"- `{f.name}`: {type_text(hints[f.name])}" for f in msgspec.structs.fields(reply))]


def method_section(m: Method) -> list[str]:
    runs = "this node" if m.runs == "node" else "the leader"
    console = f"`nodeos {m.console}`" if m.console else f"none: {m.why_no_console}"
    out = [
        f"### `{m.name}`",
        "",
        m.summary,
        "",
        f"- runs at: {runs}; since: version {m.since}; changes state: {'yes' if m.write else 'no'}",
        f"- console: {console}",
        f"- REST: {_route(m)}",
        f"- errors: {', '.join(f'`{c}`' for c in m.all_errors)}",
    ]
    if m.only_with:
        out.append(f"- present only with {m.only_with}")
    doc = (m.request.__doc__ or "").strip()
    if doc and m.request.__doc__ is not msgspec.Struct.__doc__ and "Base of every" not in doc:
        out += ["", doc]
    out += ["", *request_table(m), "", f"Reply: {type_text(m.reply)}.", *reply_fields(m.reply), ""]
    return out


def render() -> str:
    lines = [INTRO]
    areas: dict[str, list[Method]] = {}
    for m in sorted(METHODS.values(), key=lambda m: m.name):
        areas.setdefault(m.name.split(".")[0], []).append(m)
    lines.append("## Methods\n")
    lines.append(" | ".join(f"[{a}](#{a})" for a in areas) + "\n")
    for area, methods in areas.items():
        lines += [f"## {area}", ""]
        for m in methods:
            lines += method_section(m)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in args:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is out of date: run python -m nodeos.api.reference", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
