"""`nodeos events [--since SEQ] [--follow] [--json]`: what the cluster did and why.

Without --follow: the events kept (oldest first) and exit. With --follow: keep printing new
events as they happen until interrupted (Ctrl-C exits 0); with --json each event is one JSON
line (JSON Lines) so scripts can read the stream.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from nodeos.cli.output import command_runner, fail, json_option
from nodeos.errors import NodeosError
from nodeos.observe.events import format_line
from nodeos.rpc.client import Client

POLL_S = 30.0  # one long poll; the daemon answers sooner when an event arrives


def _text(data: dict[str, Any]) -> str:
    lines = [format_line(e) for e in data["events"]]
    return "\n".join(lines) if lines else f"(no events; source: {data['source']})"


@click.command()
@click.option("--since", type=click.IntRange(min=0), default=0, help="Only events after this seq.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events until interrupted.")
@click.option(
    "--scope",
    type=click.Choice(["auto", "cluster", "node"]),
    default="auto",
    show_default=True,
    help="cluster: the replicated log; node: what this node saw; auto: cluster when the map has one.",
)
@json_option
@click.pass_context
def events(ctx: click.Context, since: int, follow: bool, scope: str, as_json: bool) -> None:
    """Show the cluster's event log (node failed, failover, rebuild, drift, ...)."""
    sock = (ctx.find_root().obj or {}).get("socket", "/run/nodeos/api.sock")
    if not follow:
        _once(Client(sock, timeout_s=60), since, scope, as_json=as_json)
        return
    client = Client(sock, timeout_s=POLL_S + 30)
    try:
        while True:
            try:
                data = client.call(
                    "events.list", {"since": since, "follow": True, "timeout": POLL_S, "scope": scope}
                )
            except NodeosError as err:
                fail(err, as_json)
                return
            for e in data["events"]:
                click.echo(json.dumps(e, sort_keys=True) if as_json else format_line(e))
            sys.stdout.flush()
            since = max([since, *(e["seq"] for e in data["events"])])
            if data["last_seq"] < since:
                since = 0  # the log restarted (a new daemon's node-local ring): read it from the start
    except KeyboardInterrupt:
        return


@command_runner
def _once(client: Client, since: int, scope: str, as_json: bool) -> tuple[Any, Any]:
    data = client.call("events.list", {"since": since, "scope": scope})
    return data, _text
