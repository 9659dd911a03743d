"""Console commands for the cluster's nodes: list, show, label."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from nodeos import validate
from nodeos.cli.node import _client
from nodeos.cli.options import Seconds
from nodeos.cli.output import command_runner, json_option, table
from nodeos.cli.render import clock
from nodeos.cli.update import node_update
from nodeos.errors import BadInput, NodeosError, OperationFailed


def _labels(d: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(d.items())) or "-"


def _size(n: Any) -> str:
    return validate.format_size(int(n)) if isinstance(n, int) else "-"


@click.group()
def node() -> None:
    """The cluster's nodes: addresses, labels (failure domains), role, state, capacity, health."""


@node.command("list")
@json_option
@click.pass_context
@command_runner
def node_list(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """List every node of the cluster."""

    def human(rows: list[dict[str, Any]]) -> str:
        view = [
            dict(
                r,
                peer=r["addresses"].get("peer") or "-",
                labels=_labels(r["labels"]),
                raft=r["raft"] + (" (leader)" if r.get("leader") else ""),
                capacity=_size(r.get("capacity_bytes")),
                free=_size(r.get("free_bytes")),
            )
            for r in rows
        ]
        cols = ["name", "id", "peer", "labels", "role", "raft", "state", "capacity", "free", "health"]
        return table(view, cols)

    return _client(ctx).call("node.list"), human


@node.command("show")
@click.argument("name")
@json_option
@click.pass_context
@command_runner
def node_show(ctx: click.Context, name: str, as_json: bool) -> tuple[Any, Any]:
    """Show one node: addresses, labels, pools, drives, health."""

    def human(n: dict[str, Any]) -> str:
        lines = [
            f"name       {n['name']} (id {n['id']})",
            f"role       {n['role']}   raft {n['raft']}{' (leader)' if n.get('leader') else ''}",
            f"state      {n['state']}",
            f"peer       {n['addresses'].get('peer') or '-'}",
            f"storage    {', '.join(n['addresses'].get('storage') or []) or '-'}",
            f"labels     {_labels(n['labels'])}",
            f"dataplane  {n.get('dataplane') or '-'}",
            f"capacity   {_size(n.get('capacity_bytes'))}   free {_size(n.get('free_bytes'))}",
            f"health     {n['health']}",
            f"replicas   {n['replicas']}",
            f"primaries  {', '.join(n.get('primaries') or []) or '-'}",
            f"secondary  {', '.join(n.get('secondaries') or []) or '-'}",
            f"lease      {n.get('lease', 'up')}",
            f"rebuilds   capped at {n['rebuild_mbps']} MB/s"
            if n.get("rebuild_mbps")
            else "rebuilds   data plane default cap",
        ]
        lines.append(f"version    {n.get('version') or '- (not reported)'}")
        if n.get("slots") is None:
            lines.append(f"slots      - ({n.get('slots_note')})")
        for sl in n.get("slots") or []:
            booted = " (booted)" if sl.get("booted") else ""
            lines.append(f"slot       {sl['name']} {sl.get('version') or '-'} {sl['state']}{booted}")
        for p in n.get("pool_list") or []:
            lines.append(
                f"pool       {p['name']} {p['state']} {_size(p['size_bytes'])} free {_size(p['free_bytes'])}"
            )
        for d in n.get("drive_list") or []:
            lines.append(
                f"drive      {d['id']} {d.get('path') or '-'} {_size(d.get('size_bytes'))} {d.get('health')}"
            )
        for o in n.get("orphans") or []:
            what = ", ".join([*o.get("lvs", []), *o.get("exports", []), *filter(None, [o.get("mirror")])])
            lines.append(f"orphan     {o['kind']} {o['uuid']}: {what} (removed after a grace period)")
        if n.get("orphans_held"):
            lines.append(f"orphans    collection held: {n['orphans_held']}")
        for c in n.get("stuck_calls") or []:
            lines.append(
                f"stuck      data plane call {c['method']} (lane {c['lane']}) since {clock(c['since'])}"
            )
        return "\n".join(lines)

    client = _client(ctx)
    n = client.call("node.show", {"node": name})
    return {**n, **_version_and_slots(client, n)}, human


def _version_and_slots(client: Any, n: dict[str, Any]) -> dict[str, Any]:
    """The running version and the A/B slots. The slots are read from this machine's updater,
    so only for the node this console runs on; another node's version is the release it
    reported to the cluster (None before it reported one)."""
    try:
        me = client.call("status")
    except NodeosError:
        me = {}
    if n.get("id") == me.get("node_id") or (me.get("node_name") and n.get("name") == me.get("node_name")):
        from nodeos.update.slots import read_slots

        return {"version": me.get("version"), **read_slots()}
    return {
        "version": n.get("version"),
        "slots": None,
        "slots_note": f"read on the node itself: run `nodeos node show {n.get('name')}` on {n.get('name')}",
    }


def parse_labels(items: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """KEY=VALUE sets a label, KEY- removes it; each key at most once per call (`rack=a rack-`
    would leave what the order typed decides: refused, as `rack=a rack=b` is)."""
    set_: dict[str, str] = {}
    remove: list[str] = []
    for it in items:
        if it.endswith("-") and "=" not in it:
            k = it[:-1]
            if k in set_:
                raise _contradiction(k, f"{k}={set_[k]}", it)
            if k not in remove:
                remove.append(k)
        elif "=" in it:
            k, v = it.split("=", 1)
            if k in remove:
                raise _contradiction(k, f"{k}-", it)
            if set_.get(k, v) != v:
                raise _contradiction(k, f"{k}={set_[k]}", it)
            set_[k] = v
        else:
            raise BadInput(
                f"{it!r} is neither KEY=VALUE nor KEY-", field="labels", allowed="KEY=VALUE or KEY-"
            )
    if not set_ and not remove:
        raise BadInput("give at least one KEY=VALUE or KEY-", field="labels", allowed="KEY=VALUE or KEY-")
    return set_, remove


def _contradiction(key: str, first: str, second: str) -> BadInput:
    return BadInput(
        f"label {key!r} is changed twice in one call ({first} and {second}): give one change per key",
        field="labels",
        allowed="KEY=VALUE or KEY-, once per key",
    )


@node.command("label")
@click.argument("name")
@click.argument("labels", nargs=-1)
@json_option
@click.pass_context
@command_runner
def node_label(ctx: click.Context, name: str, labels: tuple[str, ...], as_json: bool) -> tuple[Any, Any]:
    """Set (KEY=VALUE) or remove (KEY-) labels of node NAME, e.g. `rack=a switch=sw1`."""
    from nodeos.storage.storage_map import check_labels

    set_, remove = parse_labels(labels)
    check_labels(set_, remove)
    r = _client(ctx).call("node.label", {"node": name, "set": set_, "remove": remove})
    return r, f"node {name}: labels {_labels(r['labels'])}"


def drain_left(n: dict[str, Any]) -> str | None:
    """What a drain still has to move off node view `n`, as one progress line (None: nothing)."""
    prim, sec = n.get("primaries") or [], n.get("secondaries") or []
    if not prim and not sec:
        return None
    parts = []
    if prim:
        parts.append(
            f"{len(prim)} {'primary' if len(prim) == 1 else 'primaries'} to hand over: {', '.join(prim)}"
        )
    if sec:
        parts.append(f"{len(sec)} {'replica' if len(sec) == 1 else 'replicas'} to re-place: {', '.join(sec)}")
    return "; ".join(parts)


def _await_drained(client: Any, name: str, timeout: float, as_json: bool) -> dict[str, Any]:
    """Until no replicated volume has its primary or a replica on the node, showing what is left."""
    tty = sys.stderr.isatty() and not as_json
    deadline = time.monotonic() + timeout
    shown = ""
    try:
        while True:
            n = client.call("node.show", {"node": name})
            left = drain_left(n)
            if left is None:
                return n
            if time.monotonic() >= deadline:
                raise OperationFailed(
                    f"{name} still has {left} after {timeout:.0f} s (a primary moves to an in-sync "
                    "replica on a node that is up and not draining; a replica moves once a node on "
                    "another failure domain has room, a few copies at a time: `nodeos volume show`, "
                    "`nodeos events`); run the drain again to keep waiting",
                    field="node",
                )
            line = f"drain {name}: {left}"
            if tty and line != shown:
                click.echo("\r\033[K" + line, err=True, nl=False)
                shown = line
            time.sleep(0.5)
    finally:
        if tty and shown:
            click.echo("\r\033[K", err=True, nl=False)


@node.command("drain")
@click.argument("name")
@click.option(
    "--wait/--no-wait", default=True, show_default=True, help="Wait until every primary and replica moved."
)
@click.option("--timeout", type=Seconds(), default=3600.0, show_default=True, help="How long to wait (s).")
@json_option
@click.pass_context
@command_runner
def node_drain(ctx: click.Context, name: str, wait: bool, timeout: float, as_json: bool) -> tuple[Any, Any]:
    """Take NODE out of placement and move every replicated volume off it: primaries first, then
    replicas.

    Each primary moves by a planned handoff: the node's front end stops serving first, then an
    in-sync replica on another node takes over (`nodeos events`: handoff, failover). Then each
    replica on the node is re-placed on a node of another failure domain and copied in full from
    the primary, a few at a time (`replica_replaced`; `volume show` shows the copy's progress).
    Single-replica volumes stay. A voter's vote moves too: leadership first if it leads, then a
    learner of another failure domain is promoted and the node demoted to a learner (while
    another member can take its vote). Running it again resumes; `undrain` brings the node back
    into placement (moves already made stay; its vote does not come back). While the cluster
    answers `not_leader` (nothing done: an election, or a leader too busy to take the request in
    time) the command asks again, for up to 2 minutes."""
    client = _client(ctx)
    out = client.call("node.drain", {"node": name})
    single: list[str] = []
    if wait:
        n = _await_drained(client, name, timeout, as_json)
        single = n.get("single_copies") or []
        out = dict(out, primaries=n.get("primaries"), secondaries=n.get("secondaries"), single_copies=single)

    def human(o: dict[str, Any]) -> str:
        if not wait:
            return f"{name}: draining (moves go on in the background)"
        text = f"{name}: draining, no primary or replica of a replicated volume left on it"
        if single:
            text += f"; single-replica volume(s) {', '.join(single)} stay on it"
        return text

    return out, human


@node.command("undrain")
@click.argument("name")
@json_option
@click.pass_context
@command_runner
def node_undrain(ctx: click.Context, name: str, as_json: bool) -> tuple[Any, Any]:
    """Bring NODE back into placement; planned moves off it that have not happened are withdrawn."""
    client = _client(ctx)
    return client.call("node.undrain", {"node": name}), lambda o: f"{name}: active"


@node.command("rebuild-limit")
@click.argument("name")
@click.argument("mbps")
@json_option
@click.pass_context
@command_runner
def node_rebuild_limit(ctx: click.Context, name: str, mbps: str, as_json: bool) -> tuple[Any, Any]:
    """Cap NODE's replica rebuilds at MBPS MB/s (1-100000), or `default`; applies at once,
    also to rebuilds running now."""
    if mbps == "default":
        value: int | None = None
    else:
        try:
            value = int(mbps)
        except ValueError:
            raise BadInput(
                f"rebuild limit {mbps!r} is not a number of MB/s",
                field="rebuild_mbps",
                allowed="1-100000 or default",
            ) from None
    out = _client(ctx).call("node.rebuild_limit", {"node": name, "mbps": value})
    return out, lambda o: f"{name}: rebuilds capped at " + (f"{value} MB/s" if value else "the default")


node.add_command(node_update)
