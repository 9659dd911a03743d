"""`nodeos cluster upgrade BUNDLE [--dry-run] [--wait]`, `--status`, `--pause`, `--resume`,
`--abort`: the rolling cluster upgrade (nodeos/update/service.py; docs/operations.md)."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from nodeos.cli.output import command_runner, json_option
from nodeos.errors import BadInput, OperationFailed
from nodeos.rpc.client import Client

CONTROLS = {"status": "cluster.upgrade.status", "pause": "cluster.upgrade.pause"}
CONTROLS |= {"resume": "cluster.upgrade.resume", "abort": "cluster.upgrade.abort"}
POLL_S = 2.0


def _client(ctx: click.Context) -> Client:
    obj = ctx.find_root().obj or {}
    return Client(obj.get("socket", "/run/nodeos/api.sock"), timeout_s=900.0)


@click.command("upgrade")
@click.argument("bundle", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--dry-run", is_flag=True, help="Check the bundle and the cluster and show the order; change nothing."
)
@click.option("--allow-downgrade", is_flag=True, help="Accept a bundle older than a member's release.")
@click.option("--wait/--no-wait", default=False, help="Follow the upgrade until it is done or stops.")
@click.option(
    "--timeout", type=float, default=14400.0, show_default=True, help="How long --wait follows (s)."
)
@click.option(
    "--status", "control", flag_value="status", help="Show the upgrade under way (or the last one)."
)
@click.option("--pause", "control", flag_value="pause", help="Pause after the step under way.")
@click.option("--resume", "control", flag_value="resume", help="Go on with a paused or stopped upgrade.")
@click.option("--abort", "control", flag_value="abort", help="Give up (nodes already updated stay updated).")
@json_option
@click.pass_context
@command_runner
def upgrade(
    ctx: click.Context,
    bundle: str | None,
    dry_run: bool,
    allow_downgrade: bool,
    wait: bool,
    timeout: float,
    control: str | None,
    as_json: bool,
) -> tuple[Any, Any]:
    """Upgrade every member from BUNDLE, a signed update bundle on this node: one failure domain at
    a time, the leader's last; for each, primaries handed over, the bundle copied to its nodes
    over the storage network, each node's other slot written and booted, its health gate passed,
    its replicas in sync again; then the next. A node that fails its gate (its firmware boots the
    old slot) stops the upgrade naming it; the cluster keeps serving. Checks first: every member
    up, every volume in sync, the voters spread, a newer release."""
    client = _client(ctx)
    if control is not None:
        if bundle is not None:
            raise BadInput(f"--{control} takes no BUNDLE", field="bundle")
        out = client.call(CONTROLS[control], {})
    else:
        if bundle is None:
            raise BadInput("give BUNDLE, or one of --status --pause --resume --abort", field="bundle")
        params = {"bundle": bundle, "dry_run": dry_run, "allow_downgrade": allow_downgrade}
        out = client.call("cluster.upgrade", params)
        if wait and not dry_run:
            out = _follow(client, timeout, as_json)
    return out, _human


def _follow(client: Client, timeout: float, as_json: bool) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    shown = ""
    while True:
        out = client.call("cluster.upgrade.status", {})
        up = out.get("upgrade") or {}
        if up.get("state") in ("done", "aborted"):
            return out
        if up.get("state") == "stopped":
            raise OperationFailed(f"the upgrade stopped: {up.get('reason')}", field="upgrade")
        if time.monotonic() >= deadline:
            raise OperationFailed(
                f"the upgrade is still {up.get('state')} after {timeout:.0f} s", field="upgrade"
            )
        line = _line(up)
        if not as_json and line != shown:
            click.echo(line, err=True)
            shown = line
        sys.stderr.flush()
        time.sleep(POLL_S)


def _line(up: dict[str, Any]) -> str:
    where = f"domain {up.get('domain')} ({up.get('done', 0) + 1}/{up.get('domains')}): {up.get('step')}"
    return f"upgrade to {up.get('version')}: {up.get('state')}, {where}" + (
        f"; {up['waiting']}" if up.get("waiting") else ""
    )


def _human(d: dict[str, Any]) -> str:
    lines = []
    if "domains" in d and isinstance(d["domains"], list):
        head = "dry run: " if d.get("dry_run") else ""
        lines.append(f"{head}upgrade to {d['version']}, one failure domain at a time:")
        for i, dom in enumerate(d["domains"], 1):
            lines.append(f"  {i}. {dom['name']}: {', '.join(dom['nodes'])}")
        for p in d.get("problems") or []:
            lines.append(f"  not ready: {p}")
        if d.get("dry_run"):
            lines.append("ready to start" if d.get("ok") else "not ready: nothing was started")
    up = d.get("upgrade")
    if up is None and "upgrade" in d:
        lines.append("no upgrade has been started in this cluster")
    elif up:
        lines.append(_line(up))
        if up.get("reason"):
            lines.append(f"reason     {up['reason']}")
        if up.get("released"):
            lines.append(f"released   {', '.join(up['released'])}: replicas out of sync for the update")
        for name, rel in (up.get("releases") or {}).items():
            lines.append(f"  {name:<12} {rel or '-'}")
        for h in up.get("history") or []:
            lines.append(f"  - {h}")
    return "\n".join(lines)
