"""Console commands of published volumes (issue 13): `nodeos volume publish|unpublish`.

They join the `volume` group of nodeos/cli/node.py (`nodeos.cli.main` loads the group from
here). `volume show|list|grant|revoke` serve published volumes as any other."""

from __future__ import annotations

from typing import Any

import click

from nodeos import validate
from nodeos.cli.node import _bar, _client, _size, await_ready, volume
from nodeos.cli.options import Seconds
from nodeos.cli.output import command_runner, json_option
from nodeos.storage.publish import parse_replicas

__all__ = ["volume"]


def published_human(v: dict[str, Any]) -> str:
    lines = [
        f"name       {v['name']} (published, read-only)",
        f"state      {v['state']}",
        f"size       {_size(v.get('size_bytes'))} ({v.get('size_bytes')} bytes)",
        f"nqn        {v['nqn']}",
        f"uuid       {v.get('uuid')}   nguid {v.get('nguid')}",
        f"origin     {v.get('origin')}",
        f"sha256     {v.get('checksum') or '(being computed on the source)'}",
        f"serving    {v.get('health')}",
    ]
    for r in v["replicas"]:
        extra = f"  from {r['copy_from']}" if r.get("copy_from") else ""
        if r.get("state") in ("copying", "verifying") and r.get("progress") is not None:
            extra += f"  {_bar(float(r['progress']))}"
            if r.get("resumed"):
                extra += f"  (resumed at {float(r['resumed']):.0%})"
        extra += "  joined" if r.get("joined") else ""
        extra += f"  error: {r['error']}" if r.get("error") else ""
        lines.append(f"replica    {r['node']:<12} {r['state']:<9} ANA {r.get('ana_state') or '-'}{extra}")
    for li in v.get("listeners", []):
        lines.append(f"listener   {li['trtype']} {li['traddr']}:{li['trsvcid']}  ({li.get('node')})")
    lines.append(f"hosts      {', '.join(v['hosts']) or '(none granted)'}")
    connected = sorted({h for r in v["replicas"] for h in r.get("connected") or []})
    if connected:
        lines.append(f"connected  {', '.join(connected)}")
    return "\n".join(lines)


@volume.command("publish")
@click.argument("snapshot")
@click.argument("name")
@click.option(
    "--replicas",
    default="all",
    show_default=True,
    help="Nodes holding a full copy, each on its own failure domain: a count or 'all'.",
)
@click.option(
    "--spread", default="node", show_default=True, help="Failure domain level: node, rack or switch."
)
@click.option(
    "--timeout", type=Seconds(), default=3600.0, show_default=True, help="Seconds to wait for every copy."
)
@json_option
@click.pass_context
@command_runner
def volume_publish(
    ctx: click.Context, snapshot: str, name: str, replicas: str, spread: str, timeout: float, as_json: bool
) -> tuple[Any, Any]:
    """Publish SNAPSHOT as NAME: an immutable, read-only volume every replica serves (ANA
    optimized everywhere), for any number of hosts (a model image read by a fleet)."""
    params = {
        "snapshot": validate.name(snapshot, "snapshot"),
        "name": validate.name(name, "name"),
        "replicas": parse_replicas(replicas),
        "spread": validate.choice(spread, ["node", "rack", "switch"], "spread"),
        "wait": 0,
    }
    client = _client(ctx)
    client.call("volume.publish", params, progress=f"publishing {snapshot}")
    return await_ready(client, name, timeout, as_json), published_human


@volume.command("unpublish")
@click.argument("name")
@click.option(
    "--force", is_flag=True, help="Unpublish even while hosts are connected (they lose the device)."
)
@json_option
@click.pass_context
@command_runner
def volume_unpublish(ctx: click.Context, name: str, force: bool, as_json: bool) -> tuple[Any, Any]:
    """Remove published volume NAME (refused while hosts are connected, unless forced)."""
    params = {"name": validate.name(name, "name"), "force": force}
    r = _client(ctx).call("volume.unpublish", params, progress=f"unpublishing {name}")
    return r, f"published volume {name} removed"
