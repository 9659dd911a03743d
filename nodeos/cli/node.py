"""Console commands of one node: status, pool, volume, host (drives: nodeos/cli/drive.py).

Every command validates its input locally first (same validators as the daemon, so a typo
costs no round trip and exits 2), then calls nodeosd over the API socket.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from nodeos import validate
from nodeos.cli.options import Seconds
from nodeos.cli.output import command_runner, json_option, table
from nodeos.cli.render import status_human
from nodeos.errors import NotFound, OperationFailed
from nodeos.rpc.client import Client

WAIT_OPTION_HELP = "Seconds to wait until every replica is ready (progress shown on a terminal)."
CREATE_WAIT_HELP = (
    "Seconds to wait until every replica is ready (progress shown on a terminal); 0: return once "
    "the cluster took the create, as it stands then (see `volume show`)."
)


def _client(ctx: click.Context) -> Client:
    obj = ctx.find_root().obj or {}
    return Client(obj.get("socket", "/run/nodeos/api.sock"))


def _size(n: Any) -> str:
    return validate.format_size(int(n)) if isinstance(n, int) else "-"


def _progress_line(v: dict[str, Any]) -> str:
    reps = ", ".join(
        f"{r['node']} {r['state']}" + (f" ({r['step']})" if r.get("step") else "")
        for r in v.get("replicas") or []
    )
    return f"{v.get('kind', 'volume')} {v['name']}: {v['state']}" + (f" - {reps}" if reps else "")


def await_ready(client: Client, name: str, timeout: float, as_json: bool) -> dict[str, Any]:
    """Poll `volume show` until NAME is ready, showing each replica's state on a terminal.
    Fails (exit 1) naming the node and the step when a replica cannot get there."""
    tty = sys.stderr.isatty() and not as_json
    deadline = time.monotonic() + timeout
    shown = ""
    try:
        while True:
            try:
                v = client.call("volume.show", {"name": name})
            except NotFound:
                raise OperationFailed(
                    f"{name} could not be created (it was rolled back; a snapshot that could not be "
                    "taken at its moment is dropped)",
                    field="name",
                ) from None
            if v["state"] == "ready":
                return v
            if v["state"] == "failed":
                raise OperationFailed(f"{name} could not be created: {v.get('error')}", field="name")
            if time.monotonic() >= deadline:
                raise OperationFailed(
                    f"{name} is not ready after {timeout:.0f} s: {_progress_line(v)}", field="name"
                )
            line = _progress_line(v)
            if tty and line != shown:
                click.echo("\r\033[K" + line, err=True, nl=False)
                shown = line
            time.sleep(0.3)
    finally:
        if tty and shown:
            click.echo("\r\033[K", err=True, nl=False)


# --- status -------------------------------------------------------------------------------


@click.command()
@json_option
@click.pass_context
@command_runner
def status(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """Show this node: identity, data plane, objects, pending operations."""
    return _client(ctx).call("status"), status_human


# --- pools --------------------------------------------------------------------------------


@click.group()
def pool() -> None:
    """Storage pools (thin pools over drives)."""


node_option = click.option("--node", default=None, help="The node (name or id); default: this node.")


@pool.command("create")
@click.argument("name")
@click.option("--drives", required=True, help="Comma-separated drive ids from `nodeos drive list`, or `all`.")
@node_option
@json_option
@click.pass_context
@command_runner
def pool_create(
    ctx: click.Context, name: str, drives: str, node: str | None, as_json: bool
) -> tuple[Any, Any]:
    """Create pool NAME over the given drives of a node (their contents are lost)."""
    validate.name(name, "name")
    validate.drive_ids(drives, "drives")
    params = {"name": name, "drives": drives, "node": node}
    p = _client(ctx).call("pool.create", params, progress=f"creating pool {name}")
    return p, f"pool {p['name']} created on {p['node']}: {_size(p['size_bytes'])} on {', '.join(p['drives'])}"


def _pool_rows(rows: list[dict[str, Any]]) -> str:
    view = [
        dict(
            r, size=_size(r.get("size_bytes")), free=_size(r.get("free_bytes")), drives=",".join(r["drives"])
        )
        for r in rows
    ]
    return table(view, ["node", "name", "state", "size", "free", "drives"])


@pool.command("list")
@json_option
@click.pass_context
@command_runner
def pool_list(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """List pools with size and free space."""
    return _client(ctx).call("pool.list"), _pool_rows


@pool.command("delete")
@click.argument("name")
@node_option
@json_option
@click.pass_context
@command_runner
def pool_delete(ctx: click.Context, name: str, node: str | None, as_json: bool) -> tuple[Any, Any]:
    """Delete an empty pool of a node."""
    validate.name(name, "name")
    params = {"name": name, "node": node, "wait": TEARDOWN_WAIT_S}
    r = _client(ctx).call("pool.delete", params, progress=f"deleting pool {name}")
    return r, f"pool {name} deleted on {r['node']}"


# --- volumes ------------------------------------------------------------------------------
# How long a delete waits for every node's teardown (replicas after their primary, each an agent
# pass on a busy node); the console waits this plus a margin (nodeos/rpc/client.py), and the
# daemon's answer at the end names what is still pending.
TEARDOWN_WAIT_S = 300


@click.group()
def volume() -> None:
    """Thin volumes, snapshots, clones and their grants."""


def _bar(frac: float, width: int = 20) -> str:
    """A rebuild's progress: [#######.............]  35%"""
    frac = min(max(frac, 0.0), 1.0)
    done = round(frac * width)
    return f"[{'#' * done}{'.' * (width - done)}] {frac * 100:3.0f}%"


def _vol_human(v: dict[str, Any]) -> str:
    if v.get("kind") == "published":
        from nodeos.cli.publish import published_human

        return published_human(v)
    lines = [
        f"name       {v['name']} ({v.get('kind')})",
        f"state      {v['state']}",
        f"size       {_size(v.get('size_bytes'))} ({v.get('size_bytes')} bytes)",
        f"pool       {v.get('pool')}",
    ]
    if v.get("nqn"):
        lines.append(f"nqn        {v['nqn']}")
        lines.append(f"uuid       {v.get('uuid')}   nguid {v.get('nguid')}")
    if v.get("origin"):
        lines.append(f"origin     {v['origin']}")
    if v.get("qos_iops") or v.get("qos_mbps"):
        lines.append(f"qos        iops {v.get('qos_iops') or '-'}  MB/s {v.get('qos_mbps') or '-'}")
    if v.get("replicas"):
        lines.append(f"primary    {v.get('primary')}   epoch {v.get('epoch')}   spread {v.get('spread')}")
        if v.get("in_sync") is not None:
            lines.append(f"in sync    {', '.join(v['in_sync'])}")
        if v.get("available") is False:
            why = v.get("unavailable") or "the primary is down and no in-sync replica is up to take over"
            lines.append(f"available  no: {why}")
        for r in v["replicas"]:
            extra = f"  ({r['step']})" if r.get("step") else ""
            if r.get("rebuild_progress") is not None:
                extra += f"  {_bar(float(r['rebuild_progress']))}"
            if r.get("node_health") == "down":
                extra += "  node down"
            extra += f"  error: {r['error']}" if r.get("error") else ""
            lines.append(f"replica    {r['node']:<12} {r['state']:<9} ANA {r.get('ana_state') or '-'}{extra}")
    if v.get("error"):
        lines.append(f"error      {v['error']}")
    for li in v.get("listeners", []):
        at = f"  ({li['node']})" if li.get("node") else ""
        lines.append(f"listener   {li['trtype']} {li['traddr']}:{li['trsvcid']}{at}")
    if "hosts" in v:
        lines.append(f"hosts      {', '.join(v['hosts']) or '(none granted)'}")
    if v.get("connected_hosts"):
        lines.append(f"connected  {', '.join(v['connected_hosts'])}")
    if v.get("snapshots"):
        lines.append(f"snapshots  {', '.join(v['snapshots'])}")
    return "\n".join(lines)


@volume.command("create")
@click.argument("name")
@click.option("--size", required=True, help="e.g. 10GiB, 512MiB, 10GB or a number of bytes.")
@click.option(
    "--pool", "pool_name", default=None, help="Pool (default: the healthy pool with most free space)."
)
@click.option(
    "--replicas", default="1", show_default=True, help="Copies (1-3), each on its own failure domain."
)
@click.option(
    "--spread",
    default="node",
    show_default=True,
    help="Failure domain level the replicas are spread over: node, rack or switch (node labels).",
)
@click.option("--qos-iops", type=int, default=None, help="IOPS limit (multiple of 1000; SPDK only).")
@click.option("--qos-mbps", type=int, default=None, help="Bandwidth limit in MB/s (SPDK only).")
@click.option("--timeout", type=Seconds(minimum=0), default=300.0, show_default=True, help=CREATE_WAIT_HELP)
@json_option
@click.pass_context
@command_runner
def volume_create(
    ctx: click.Context,
    name: str,
    size: str,
    pool_name: str | None,
    replicas: str,
    spread: str,
    qos_iops: int | None,
    qos_mbps: int | None,
    timeout: float,
    as_json: bool,
) -> tuple[Any, Any]:
    """Create a thin volume with 1-3 replicas, exported to no host until granted."""
    params = {
        "name": validate.name(name, "name"),
        "size": validate.size(size, "size"),
        "pool": validate.name(pool_name, "pool") if pool_name is not None else None,
        "replicas": validate.replicas(replicas),
        "spread": validate.choice(spread, ["node", "rack", "switch"], "spread"),
        "qos_iops": validate.qos_iops(qos_iops),
        "qos_mbps": validate.qos_mbps(qos_mbps),
        "wait": 0,
    }
    client = _client(ctx)
    client.call("volume.create", params, progress=f"placing volume {name}")
    if timeout == 0:  # committed: the agents make it in the background
        return client.call("volume.show", {"name": name}), _vol_human
    return await_ready(client, name, timeout, as_json), _vol_human


@volume.command("list")
@json_option
@click.pass_context
@command_runner
def volume_list(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """List volumes, clones and snapshots."""

    def human(rows: list[dict[str, Any]]) -> str:
        view = [
            dict(
                r,
                size=_size(r.get("size_bytes")),
                hosts=len(r.get("hosts") or []),
                origin=r.get("origin") or "-",
                primary=r.get("primary") or "-",
            )
            for r in rows
        ]
        return table(view, ["name", "kind", "size", "state", "health", "primary", "hosts", "origin"])

    return _client(ctx).call("volume.list"), human


@volume.command("show")
@click.argument("name")
@json_option
@click.pass_context
@command_runner
def volume_show(ctx: click.Context, name: str, as_json: bool) -> tuple[Any, Any]:
    """Show a volume: NQN, size, state, listeners, grants, connected hosts."""
    validate.name(name, "name")
    return _client(ctx).call("volume.show", {"name": name}), _vol_human


@volume.command("resize")
@click.argument("name")
@click.option("--size", required=True, help="New size; volumes only grow.")
@json_option
@click.pass_context
@command_runner
def volume_resize(ctx: click.Context, name: str, size: str, as_json: bool) -> tuple[Any, Any]:
    """Grow a volume (connected hosts see the new size)."""
    params = {"name": validate.name(name, "name"), "size": validate.size(size, "size")}
    return _client(ctx).call("volume.resize", params, progress=f"resizing volume {name}"), _vol_human


@volume.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True, help="Delete even while hosts are connected (they lose the device).")
@json_option
@click.pass_context
@command_runner
def volume_delete(ctx: click.Context, name: str, force: bool, as_json: bool) -> tuple[Any, Any]:
    """Delete a volume, clone or snapshot."""
    validate.name(name, "name")
    params = {"name": name, "force": force, "wait": TEARDOWN_WAIT_S}
    r = _client(ctx).call("volume.delete", params, progress=f"deleting {name}")
    return r, f"{r.get('kind', 'volume')} {name} deleted"


@volume.command("snapshot")
@click.argument("name")
@click.argument("snapshot")
@json_option
@click.pass_context
@command_runner
def volume_snapshot(ctx: click.Context, name: str, snapshot: str, as_json: bool) -> tuple[Any, Any]:
    """Take snapshot SNAPSHOT of volume NAME."""
    params = {"name": validate.name(name, "name"), "snapshot": validate.name(snapshot, "snapshot"), "wait": 0}
    client = _client(ctx)
    client.call("volume.snapshot", params, progress=f"snapshotting {name}")
    return await_ready(client, snapshot, 300.0, as_json), f"snapshot {snapshot} of {name} taken"


@volume.command("clone")
@click.argument("snapshot")
@click.argument("new")
@click.option(
    "--replicas", type=click.IntRange(1, 3), default=None, help="Default: as many as the snapshot has."
)
@json_option
@click.pass_context
@command_runner
def volume_clone(
    ctx: click.Context, snapshot: str, new: str, replicas: int | None, as_json: bool
) -> tuple[Any, Any]:
    """Create volume NEW from snapshot SNAPSHOT (on the snapshot's nodes)."""
    params = {
        "snapshot": validate.name(snapshot, "snapshot"),
        "name": validate.name(new, "name"),
        "replicas": replicas,
        "wait": 0,
    }
    client = _client(ctx)
    client.call("volume.clone", params, progress=f"cloning {snapshot}")
    return await_ready(client, new, 300.0, as_json), _vol_human


def _grant_params(name: str, hosts: tuple[str, ...]) -> dict[str, Any]:
    nqns = [validate.host_nqn(h, "host") for h in hosts]
    who: dict[str, Any] = {"host": nqns[0]} if len(nqns) == 1 else {"hosts": nqns}
    return {"name": validate.name(name, "name"), **who}


@volume.command("grant")
@click.argument("name")
@click.option(
    "--host",
    "hosts",
    required=True,
    multiple=True,
    help="Host NQN (registered with `nodeos host add`); repeat it to grant several at once.",
)
@json_option
@click.pass_context
@command_runner
def volume_grant(ctx: click.Context, name: str, hosts: tuple[str, ...], as_json: bool) -> tuple[Any, Any]:
    """Let hosts see and connect to a volume (several --host: one change for all of them)."""
    params = _grant_params(name, hosts)
    r = _client(ctx).call("volume.grant", params, progress=f"granting {name}")
    if "hosts" in params:
        return r, f"{len(params['hosts'])} hosts may use {name} ({r.get('changed')} newly granted)"
    return r, f"{hosts[0]} may use {name}" + ("" if r.get("changed") else " (already granted)")


@volume.command("revoke")
@click.argument("name")
@click.option("--host", "hosts", required=True, multiple=True, help="Host NQN; repeat it for several.")
@json_option
@click.pass_context
@command_runner
def volume_revoke(ctx: click.Context, name: str, hosts: tuple[str, ...], as_json: bool) -> tuple[Any, Any]:
    """Take hosts' access away (they are disconnected)."""
    params = _grant_params(name, hosts)
    _client(ctx).call("volume.revoke", params, progress=f"revoking {name}")
    return params, f"{', '.join(hosts)} no longer ha{'s' if len(hosts) == 1 else 've'} access to {name}"
