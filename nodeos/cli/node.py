"""Console commands of one node: status, drive, pool, volume, host.

Every command validates its input locally first (same validators as the daemon, so a typo
costs no round trip and exits 2), then calls nodeosd over the API socket.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from nodeos import validate
from nodeos.cli.output import command_runner, json_option, table
from nodeos.cli.render import status_human
from nodeos.errors import BadInput
from nodeos.rpc.client import Client


def _client(ctx: click.Context) -> Client:
    obj = ctx.find_root().obj or {}
    return Client(obj.get("socket", "/run/nodeos/api.sock"))


def _size(n: Any) -> str:
    return validate.format_size(int(n)) if isinstance(n, int) else "-"


# --- status -------------------------------------------------------------------------------


@click.command()
@json_option
@click.pass_context
@command_runner
def status(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """Show this node: identity, data plane, objects, pending operations."""
    return _client(ctx).call("status"), status_human


# --- drives -------------------------------------------------------------------------------


@click.group()
def drive() -> None:
    """NVMe drives of this node."""


@drive.command("list")
@json_option
@click.pass_context
@command_runner
def drive_list(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """List drives with model, serial, size, health and pool."""
    rows = _client(ctx).call("drive.list")

    def human(rows: list[dict[str, Any]]) -> str:
        view = [dict(r, size=_size(r.get("size_bytes")), pool=r.get("pool") or "-") for r in rows]
        return table(view, ["id", "path", "model", "serial", "firmware", "size", "health", "pool"])

    return rows, human


# --- pools --------------------------------------------------------------------------------


@click.group()
def pool() -> None:
    """Storage pools (thin pools over drives)."""


@pool.command("create")
@click.argument("name")
@click.option("--drives", required=True, help="Comma-separated drive ids from `nodeos drive list`, or `all`.")
@json_option
@click.pass_context
@command_runner
def pool_create(ctx: click.Context, name: str, drives: str, as_json: bool) -> tuple[Any, Any]:
    """Create pool NAME over the given drives (their contents are lost)."""
    validate.name(name, "name")
    validate.drive_ids(drives, "drives")
    p = _client(ctx).call("pool.create", {"name": name, "drives": drives}, progress=f"creating pool {name}")
    return p, f"pool {p['name']} created: {_size(p['size_bytes'])} on {', '.join(p['drives'])}"


def _pool_rows(rows: list[dict[str, Any]]) -> str:
    view = [
        dict(
            r, size=_size(r.get("size_bytes")), free=_size(r.get("free_bytes")), drives=",".join(r["drives"])
        )
        for r in rows
    ]
    return table(view, ["name", "state", "size", "free", "drives"])


@pool.command("list")
@json_option
@click.pass_context
@command_runner
def pool_list(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """List pools with size and free space."""
    return _client(ctx).call("pool.list"), _pool_rows


@pool.command("delete")
@click.argument("name")
@json_option
@click.pass_context
@command_runner
def pool_delete(ctx: click.Context, name: str, as_json: bool) -> tuple[Any, Any]:
    """Delete an empty pool."""
    validate.name(name, "name")
    r = _client(ctx).call("pool.delete", {"name": name}, progress=f"deleting pool {name}")
    return r, f"pool {name} deleted"


# --- volumes ------------------------------------------------------------------------------


@click.group()
def volume() -> None:
    """Thin volumes, snapshots, clones and their grants."""


def _vol_human(v: dict[str, Any]) -> str:
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
    for li in v.get("listeners", []):
        lines.append(f"listener   {li['trtype']} {li['traddr']}:{li['trsvcid']}")
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
@click.option("--qos-iops", type=int, default=None, help="IOPS limit (multiple of 1000; SPDK only).")
@click.option("--qos-mbps", type=int, default=None, help="Bandwidth limit in MB/s (SPDK only).")
@json_option
@click.pass_context
@command_runner
def volume_create(
    ctx: click.Context,
    name: str,
    size: str,
    pool_name: str | None,
    qos_iops: int | None,
    qos_mbps: int | None,
    as_json: bool,
) -> tuple[Any, Any]:
    """Create a thin volume, exported to no host until granted."""
    params = {
        "name": validate.name(name, "name"),
        "size": validate.size(size, "size"),
        "pool": validate.name(pool_name, "pool") if pool_name is not None else None,
        "qos_iops": validate.qos_iops(qos_iops),
        "qos_mbps": validate.qos_mbps(qos_mbps),
    }
    v = _client(ctx).call("volume.create", params, progress=f"creating volume {name}")
    return v, _vol_human


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
            )
            for r in rows
        ]
        return table(view, ["name", "kind", "pool", "size", "state", "hosts", "origin"])

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
    r = _client(ctx).call("volume.delete", {"name": name, "force": force}, progress=f"deleting {name}")
    return r, f"{r.get('kind', 'volume')} {name} deleted"


@volume.command("snapshot")
@click.argument("name")
@click.argument("snapshot")
@json_option
@click.pass_context
@command_runner
def volume_snapshot(ctx: click.Context, name: str, snapshot: str, as_json: bool) -> tuple[Any, Any]:
    """Take snapshot SNAPSHOT of volume NAME."""
    params = {"name": validate.name(name, "name"), "snapshot": validate.name(snapshot, "snapshot")}
    r = _client(ctx).call("volume.snapshot", params, progress=f"snapshotting {name}")
    return r, f"snapshot {snapshot} of {name} taken"


@volume.command("clone")
@click.argument("snapshot")
@click.argument("new")
@json_option
@click.pass_context
@command_runner
def volume_clone(ctx: click.Context, snapshot: str, new: str, as_json: bool) -> tuple[Any, Any]:
    """Create volume NEW from snapshot SNAPSHOT."""
    params = {"snapshot": validate.name(snapshot, "snapshot"), "name": validate.name(new, "name")}
    return _client(ctx).call("volume.clone", params, progress=f"cloning {snapshot}"), _vol_human


@volume.command("grant")
@click.argument("name")
@click.option("--host", "host", required=True, help="Host NQN (registered with `nodeos host add`).")
@json_option
@click.pass_context
@command_runner
def volume_grant(ctx: click.Context, name: str, host: str, as_json: bool) -> tuple[Any, Any]:
    """Let a host see and connect to a volume."""
    params = {"name": validate.name(name, "name"), "host": validate.host_nqn(host, "host")}
    r = _client(ctx).call("volume.grant", params, progress=f"granting {name}")
    return r, f"{host} may use {name}" + ("" if r.get("changed") else " (already granted)")


@volume.command("revoke")
@click.argument("name")
@click.option("--host", "host", required=True, help="Host NQN.")
@json_option
@click.pass_context
@command_runner
def volume_revoke(ctx: click.Context, name: str, host: str, as_json: bool) -> tuple[Any, Any]:
    """Take a host's access away (it is disconnected)."""
    params = {"name": validate.name(name, "name"), "host": validate.host_nqn(host, "host")}
    _client(ctx).call("volume.revoke", params, progress=f"revoking {name}")
    return params, f"{host} no longer has access to {name}"


# --- hosts --------------------------------------------------------------------------------


@click.group()
def host() -> None:
    """Hosts (GPU nodes) by host NQN."""


def _read_secret(secret: str | None, secret_file: str | None) -> str | None:
    if secret is not None and secret_file is not None:
        raise BadInput("give --dhchap-secret or --dhchap-secret-file, not both", field="dhchap_secret")
    if secret_file is not None:
        try:
            secret = (
                click.get_text_stream("stdin").read() if secret_file == "-" else Path(secret_file).read_text()
            )
        except OSError as exc:
            raise BadInput(f"cannot read {secret_file}: {exc.strerror}", field="dhchap_secret_file") from None
        secret = secret.strip()
    return validate.dhchap_secret(secret)


@host.command("add")
@click.argument("hostnqn")
@click.option("--dhchap-secret", default=None, help="DH-HMAC-CHAP secret (DHHC-1:...); visible in `ps`.")
@click.option("--dhchap-secret-file", default=None, help="Read the secret from a file, or - for stdin.")
@json_option
@click.pass_context
@command_runner
def host_add(
    ctx: click.Context, hostnqn: str, dhchap_secret: str | None, dhchap_secret_file: str | None, as_json: bool
) -> tuple[Any, Any]:
    """Register a host by its NQN (optionally with a DH-HMAC-CHAP secret)."""
    params = {
        "nqn": validate.host_nqn(hostnqn, "host"),
        "dhchap_secret": _read_secret(dhchap_secret, dhchap_secret_file),
    }
    r = _client(ctx).call("host.add", params)
    return r, f"host {hostnqn} added" + (" with DH-HMAC-CHAP" if r.get("dhchap") else "")


@host.command("list")
@json_option
@click.pass_context
@command_runner
def host_list(ctx: click.Context, as_json: bool) -> tuple[Any, Any]:
    """List registered hosts and the volumes granted to them (secrets never shown)."""

    def human(rows: list[dict[str, Any]]) -> str:
        view = [
            dict(
                r, dhchap="yes" if r.get("dhchap") else "no", volumes=",".join(r.get("volumes") or []) or "-"
            )
            for r in rows
        ]
        return table(view, ["nqn", "dhchap", "volumes"])

    return _client(ctx).call("host.list"), human


@host.command("remove")
@click.argument("hostnqn")
@json_option
@click.pass_context
@command_runner
def host_remove(ctx: click.Context, hostnqn: str, as_json: bool) -> tuple[Any, Any]:
    """Forget a host (it must have no grants left)."""
    r = _client(ctx).call("host.remove", {"nqn": validate.host_nqn(hostnqn, "host")})
    return r, f"host {hostnqn} removed"
