"""`nodeos cluster ...`: form and inspect the Raft cluster; a linearizable key/value space.

All commands talk to the local nodeosd; it forwards to the leader where needed. Input is
checked here first (same validators as the daemon) so a typo exits 2 without a round trip.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from nodeos import validate
from nodeos.cli.options import Seconds
from nodeos.cli.output import command_runner, json_option, print_json, table
from nodeos.cli.upgrade import upgrade
from nodeos.cluster.secretroll import rotate_timeout
from nodeos.cluster.token import MAX_USES, check_ttl, check_uses, decode_token
from nodeos.cluster.voters import check_policy_args
from nodeos.errors import BadInput
from nodeos.rpc.client import Client

F = TypeVar("F", bound=Callable[..., Any])


def _client(ctx: click.Context, timeout_s: float = 60.0) -> Client:
    obj = ctx.find_root().obj or {}
    return Client(obj.get("socket", "/run/nodeos/api.sock"), timeout_s=timeout_s)


def _member_options(fn: F) -> F:
    """`--node-id` and `--failure-domain`: how this node enters a cluster (init and join)."""
    fn = click.option("--failure-domain", default=None, help="Failure domain of this node (e.g. a rack).")(fn)
    return click.option(
        "--node-id",
        type=click.IntRange(min=1, max=2**63 - 1),
        default=None,
        help="Raft id of this node (default: derived from the node's identity).",
    )(fn)


def _member_params(node_id: int | None, failure_domain: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if node_id is not None:
        params["node_id"] = node_id
    if failure_domain is not None:
        params["failure_domain"] = failure_domain
    return params


@click.group()
def cluster() -> None:
    """Form, join, leave and inspect the cluster."""


@cluster.command()
@_member_options
@click.option(
    "--feature-level",
    type=click.IntRange(min=1),
    default=None,
    help="Start at this cluster feature level (default: this node's; lower when nodes of an older "
    "release will join; raise it later with `cluster set feature-level`).",
)
@json_option
@click.pass_context
@command_runner
def init(
    ctx: click.Context,
    node_id: int | None,
    failure_domain: str | None,
    feature_level: int | None,
    as_json: bool,
) -> tuple[Any, Any]:
    """Create a new cluster with this node as its only member; prints the join token."""
    params = _member_params(node_id, failure_domain)
    if feature_level is not None:
        params["feature_level"] = feature_level
    out = _client(ctx).call("cluster.init", params)
    return (
        out,
        lambda d: (
            f"created cluster {d['cluster_id']} (this node: {d['node_id']}, at {d['address']})\n"
            f"join token, short-lived: valid for {_minutes(d)} minutes, until "
            f"{_when(d.get('token_expires'))}, for any number of joins until then; keep it private:\n"
            f"{d['token']}\n"
            f"on each other node, with the token in a file (or on stdin: -):\n"
            f"  nodeos cluster join {d['address']} --token-file TOKEN_FILE\n"
            f"later, or for one node only: nodeos cluster token --uses 1"
        ),
    )


def _minutes(d: dict[str, Any]) -> str:
    import time

    exp = d.get("token_expires")
    return str(max(0, round((exp - time.time()) / 60))) if isinstance(exp, (int, float)) else "?"


def _when(ts: Any) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(ts)) if isinstance(ts, (int, float)) else "?"


def _read_token(token: str | None, token_file: str | None) -> str:
    """The join token from --token-file (a path, or - for stdin) or, discouraged, --token."""
    if (token is None) == (token_file is None):
        raise BadInput("give the join token with --token-file FILE (or - for stdin)", field="token_file")
    if token is not None:
        click.echo(
            "warning: a token on the command line is visible to every user (ps); use --token-file", err=True
        )
        return token
    assert token_file is not None
    try:
        text = sys.stdin.read() if token_file == "-" else Path(token_file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read the token file {token_file}: {exc}", field="token_file") from None
    return text.strip()


@cluster.command()
@click.argument("address")
@click.option("--token-file", default=None, help="File holding the join token; - reads it from stdin.")
@click.option("--token", default=None, help="The join token itself (visible in ps: prefer --token-file).")
@_member_options
@json_option
@click.pass_context
@command_runner
def join(
    ctx: click.Context,
    address: str,
    token_file: str | None,
    token: str | None,
    node_id: int | None,
    failure_domain: str | None,
    as_json: bool,
) -> tuple[Any, Any]:
    """Join the cluster that the member at ADDRESS (HOST:PORT) belongs to."""
    validate.host_port(address, "address")
    token = _read_token(token, token_file)
    decode_token(token)
    params = {"address": address, "token": token, **_member_params(node_id, failure_domain)}
    out = _client(ctx).call("cluster.join", params, progress="joining")
    return out, lambda d: f"joined cluster {d['cluster_id']} as node {d['node_id']}"


@cluster.command()
@json_option
@click.pass_context
@command_runner
def leave(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """Remove this node from its cluster (handing over leadership first if it leads)."""
    out = _client(ctx).call("cluster.leave", {}, progress="leaving")
    return out, lambda d: f"node {d['node_id']} left cluster {d['left']}"


@cluster.command()
@click.argument("node_id", type=click.IntRange(min=1, max=2**63 - 1))
@json_option
@click.pass_context
@command_runner
def remove(ctx: click.Context, node_id: int, as_json: bool) -> tuple[Any, Any]:
    """Remove another member (gone for good or compromised); it holds no pools."""
    out = _client(ctx).call("cluster.remove", {"node_id": node_id}, progress="removing")
    return out, _removed_human


def _removed_human(d: dict[str, Any]) -> str:
    text = f"node {d['removed']} removed from the cluster"
    ca = d.get("ca")
    if ca is None:
        return text
    if ca.get("moved"):
        return (
            f"{text}; it held the cluster CA: a new CA (generation {ca['generation']}) now lives on "
            f"node {ca['holder']}, which issues join tokens; the old CA is not trusted"
        )
    return f"{text}; it held the cluster CA, which did not move: {ca['problem']}"


@cluster.command()
@click.option("--ttl", type=int, default=None, help="Seconds the new token stays valid (default 3600).")
@click.option(
    "--uses",
    type=int,
    default=None,
    help=f"Joins the new token allows, 1 to {MAX_USES} (1: single use; default: any until it expires).",
)
@click.option("--list", "list_", is_flag=True, help="List this node's unexpired tokens (ids only).")
@click.option("--revoke", default=None, metavar="TOKEN_ID", help="Revoke a token this node issued.")
@json_option
@click.pass_context
@command_runner
def token(
    ctx: click.Context, ttl: int | None, uses: int | None, list_: bool, revoke: str | None, as_json: bool
) -> tuple[Any, Any]:
    """Issue a join token (short-lived, revocable; not the cluster secret), list or revoke them."""
    if list_ and revoke:
        raise BadInput("give either --list or --revoke", field="revoke")
    if (list_ or revoke) and (uses is not None or ttl is not None):
        raise BadInput("--ttl and --uses go with issuing a token, not with --list or --revoke", field="uses")
    if list_:
        out = _client(ctx).call("cluster.token.list", {})
        return out, lambda d: table(
            [
                {
                    "id": t["token_id"],
                    "expires": _when(t["expires"]),
                    "used": f"{len(t.get('used_by') or [])}/{t['uses'] if t.get('uses') else 'any'}",
                }
                for t in d["tokens"]
            ],
            ["id", "expires", "used"],
        )
    if revoke:
        out = _client(ctx).call("cluster.token.revoke", {"token_id": revoke})
        return out, lambda d: f"revoked join token {d['revoked']}"
    params: dict[str, Any] = {}
    if ttl is not None:
        params["ttl"] = check_ttl(ttl)  # exit 2 before a round trip
    if uses is not None:
        params["uses"] = check_uses(uses)
    out = _client(ctx).call("cluster.token", params)
    return out, lambda d: d["token"]


def _rotate(ctx: click.Context, timeout: float | None, method: str) -> Any:
    params: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    wait = rotate_timeout(params)  # exit 2 before a round trip
    return _client(ctx, timeout_s=wait + 15.0).call(method, params, progress="rotating")


_ROTATE_TIMEOUT_HELP = "Seconds to wait for every member (default 30, 1 to 300)."


@cluster.command("rotate-secret")
@click.option("--timeout", type=Seconds(maximum=300, minimum=1), default=None, help=_ROTATE_TIMEOUT_HELP)
@json_option
@click.pass_context
@command_runner
def rotate_secret(ctx: click.Context, timeout: float | None, as_json: bool) -> tuple[Any, Any]:
    """Replace the cluster secret on every member, in two phases: no member stops talking."""
    return (
        _rotate(ctx, timeout, "cluster.secret.rotate"),
        lambda d: (
            f"cluster secret rotated to generation {d['generation']} on nodes "
            f"{', '.join(map(str, d['members']))}; the old secret is refused from now on"
        ),
    )


@cluster.command("rotate-ca")
@click.option("--timeout", type=Seconds(maximum=300, minimum=1), default=None, help=_ROTATE_TIMEOUT_HELP)
@json_option
@click.pass_context
@command_runner
def rotate_ca(ctx: click.Context, timeout: float | None, as_json: bool) -> tuple[Any, Any]:
    """Replace the cluster CA and every member's certificate; the new CA lives on this member."""
    return (
        _rotate(ctx, timeout, "cluster.ca.rotate"),
        lambda d: (
            f"cluster CA rotated to generation {d['generation']}; nodes "
            f"{', '.join(map(str, d['members']))} present certificates of it; the old CA is not trusted"
        ),
    )


def _status_human(d: dict[str, Any]) -> str:
    if not d.get("member"):
        return "this node is not a member of a cluster"
    head = (
        f"cluster  {d['cluster_id']}\nnode     {d['node_id']} ({d['role']})\n"
        f"leader   {d['leader'] or '(none)'}   term {d['term']}   "
        f"commit {d['commit']}   applied {d['applied']}"
    )
    sec = d.get("secret") or {}
    if sec:
        roll = sec.get("roll") or {}
        rolling = f"   (rolling to {roll['gen']})" if roll.get("phase") == "switch" else ""
        head += f"\nsecret   generation {sec['generation']}{rolling}"
        if sec.get("problem"):
            head += f"\n         {sec['problem']}"
    ca = d.get("ca") or {}
    if ca:
        roll = ca.get("roll") or {}
        rolling = f"   (rolling to {roll['gen']})" if roll.get("phase") == "switch" else ""
        where = f"   on node {ca['holder']}" if ca.get("holder") is not None else ""
        head += f"\nca       generation {ca['generation']}{where}{rolling}"
        if ca.get("problem"):
            head += f"\n         {ca['problem']}"
    feat = d.get("features") or {}
    if feat:
        head += (
            f"\nfeatures level {feat.get('feature_level')}   this node: release {feat.get('release')}, "
            f"knows level {feat.get('knows_level')}"
        )
        if feat.get("stalled"):
            head += f"\n         STOPPED: {feat['stalled']['message']}"
    head += _nonconforming_human(d)
    rows = [
        {
            "id": m["node_id"],
            "name": m.get("name") or "",
            "address": m.get("address") or "",
            "role": m.get("role") or "",
            "raft": m["raft"] + (" *" if m["node_id"] == d["leader"] else ""),
            "match": "-" if m.get("match") is None else m["match"],
            "lag": "-" if m.get("lag") is None else m["lag"],
            "domain": m.get("domain") or "-",
            "release": f"{m.get('release') or '-'} (level {m.get('knows_level', 1)})",
        }
        for m in d["members"]
    ]
    cols = ["id", "name", "address", "role", "raft", "match", "lag", "domain", "release"]
    return head + _voters_human(d) + "\n\n" + table(rows, cols)


def _nonconforming_human(d: dict[str, Any]) -> str:
    """Committed entries whose arguments broke their typed record (ClusterMap.nonconforming)."""
    n = int(d.get("nonconforming_commands") or 0)
    if not n:
        return ""
    out = (
        f"\nmap      {n} committed entr{'y' if n == 1 else 'ies'} whose arguments break their command's "
        "typed record (seen at apply, applied as the handler read them, not refused)"
    )
    for x in d.get("nonconforming") or []:
        out += f"\n         entry {x['index']}: {x['cmd']} v{x['v']}: {x['why']}"
    return out


def _voters_human(d: dict[str, Any]) -> str:
    """Who votes and why: the leader's view (nodeos/cluster/voters.py)."""
    v = d.get("voters")
    if not v:
        return ""
    out = (
        f"\nvoters   {len(v['voters'])} of {v['wanted']} wanted   learners {len(v['learners'])}"
        f"   {v.get('level_why') or '(the leader did not answer)'}"
    )
    why = {m["node_id"]: m.get("why") for m in d["members"]}
    for nid in v["voters"]:
        out += f"\n  voter {nid}: {why.get(nid) or '-'}"
    for key, label in (("next", "next"), ("last", "last")):
        ch = v.get(key)
        if ch:
            out += f"\n  {label}: {ch['kind']} {ch['node_id']} ({ch['reason']})"
    return out


@cluster.command()
@json_option
@click.pass_context
@command_runner
def status(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """Members, leader, term, commit index and each member's replication lag."""
    return _client(ctx).call("cluster.status", {}), _status_human


@cluster.group("set")
def set_() -> None:
    """Cluster-wide settings: how many voters, when a silent voter is replaced."""


@set_.command("voters")
@click.argument("count")
@json_option
@click.pass_context
@command_runner
def set_voters(ctx: click.Context, count: str, as_json: bool) -> tuple[Any, Any]:
    """Keep COUNT voters (3 or 5) on distinct failure domains; every other member is a learner."""
    n = int(count) if count.strip().isdigit() else count
    args = check_policy_args({"voters": n})  # exit 2 naming the field before anything is sent
    return _client(ctx).call("cluster.set", args), _set_human


@set_.command("voter-down-after")
@click.argument("seconds")
@json_option
@click.pass_context
@command_runner
def set_voter_down(ctx: click.Context, seconds: str, as_json: bool) -> tuple[Any, Any]:
    """Replace a voter the leader has not heard from for SECONDS (2 to 3600; default 30)."""
    try:
        s: Any = float(seconds)
    except ValueError:
        s = seconds
    args = check_policy_args({"voter_down_s": s})
    return _client(ctx).call("cluster.set", args), _set_human


def _set_human(d: dict[str, Any]) -> str:
    return f"voters {d['voters']}; a voter silent for {d['voter_down_s']:g} s is replaced"


@set_.command("feature-level")
@click.argument("level")
@json_option
@click.pass_context
@command_runner
def set_feature_level(ctx: click.Context, level: str, as_json: bool) -> tuple[Any, Any]:
    """Raise the cluster's feature level to LEVEL once every member runs a release that knows it
    (refused, naming the member, while one does not; never lowered)."""
    if not level.strip().isdigit() or int(level) < 1:
        raise BadInput(f"feature level {level!r} must be a positive integer", field="feature_level")
    out = _client(ctx).call("cluster.set", {"feature_level": int(level)})
    return out, lambda d: f"cluster feature level {d['previous']} -> {d['feature_level']}"


# --- kv -------------------------------------------------------------------------------------


@cluster.group()
def kv() -> None:
    """A linearizable key/value space in the cluster map (for operators' debugging and tests)."""


def _key(key: str) -> str:
    if not key or len(key) > 256:
        raise BadInput("key must be 1..256 characters", field="key")
    return key


timeout_option = click.option(
    "--timeout",
    type=Seconds(maximum=300, minimum=0.1),
    default=5.0,
    show_default=True,
    help="Seconds to wait for the cluster.",
)


@kv.command("get")
@click.argument("key")
@timeout_option
@json_option
@click.pass_context
@command_runner
def kv_get(ctx: click.Context, key: str, timeout: float, as_json: bool) -> tuple[Any, Any]:
    """Read KEY (linearizable: confirmed with a quorum by the leader)."""
    out = _client(ctx).call("cluster.kv.get", {"key": _key(key), "timeout": timeout})
    return out, lambda d: "(absent)" if d["value"] is None else str(d["value"])


@kv.command("put")
@click.argument("key")
@click.argument("value")
@timeout_option
@json_option
@click.pass_context
@command_runner
def kv_put(ctx: click.Context, key: str, value: str, timeout: float, as_json: bool) -> tuple[Any, Any]:
    """Set KEY to VALUE once committed."""
    out = _client(ctx).call("cluster.kv.put", {"key": _key(key), "value": value, "timeout": timeout})
    return out, lambda d: f"{d['key']} = {d['value']} (revision {d['revision']})"


@kv.command("cas")
@click.argument("key")
@click.argument("value")
@click.option("--expect", default=None, help="Only set VALUE if KEY currently holds this value.")
@click.option("--expect-absent", is_flag=True, help="Only set VALUE if KEY does not exist.")
@timeout_option
@json_option
@click.pass_context
@command_runner
def kv_cas(
    ctx: click.Context,
    key: str,
    value: str,
    expect: str | None,
    expect_absent: bool,
    timeout: float,
    as_json: bool,
) -> tuple[Any, Any]:
    """Compare-and-set: set KEY to VALUE only if it holds --expect (or is absent)."""
    if (expect is None) == (not expect_absent):
        raise BadInput("give exactly one of --expect VALUE or --expect-absent", field="expect")
    out = _client(ctx).call(
        "cluster.kv.cas", {"key": _key(key), "expect": expect, "value": value, "timeout": timeout}
    )
    if not out["succeeded"]:
        # The command ran; the comparison failed: exit 1 with the value found, the same exit code
        # with --json (a script tests the exit code), which still prints the reply.
        from nodeos.errors import EXIT_FAILED, OperationFailed

        if as_json:
            print_json(out)
            sys.exit(EXIT_FAILED)
        found = "(absent)" if out["value"] is None else out["value"]
        raise OperationFailed(f"{key} holds {found}, not the expected value; nothing changed")
    return out, lambda d: f"{d['key']} = {d['value']} (revision {d['revision']})"


@kv.command("delete")
@click.argument("key")
@timeout_option
@json_option
@click.pass_context
@command_runner
def kv_delete(ctx: click.Context, key: str, timeout: float, as_json: bool) -> tuple[Any, Any]:
    """Remove KEY (a command of cluster feature level 2)."""
    out = _client(ctx).call("cluster.kv.delete", {"key": _key(key), "timeout": timeout})
    return out, lambda d: f"{d['key']} deleted" if d["deleted"] else f"{d['key']} was absent"


cluster.add_command(upgrade)
