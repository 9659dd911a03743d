"""`nodeos net`: show, plan, apply, verify and watch the node's lossless network.

These commands talk to the kernel directly (netlink, sysfs, configfs) and need no daemon.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

import click

from nodeos.cli.options import Seconds
from nodeos.cli.output import command_runner, json_option, print_json, table
from nodeos.errors import BadInput
from nodeos.net.model import NetConfig, load_config
from nodeos.net.plan import Plan

EXIT_DRIFT = 3

config_option = click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="TOML network config (interfaces, qos, management).",
)
netns_option = click.option(
    "--netns",
    default=None,
    metavar="NAME",
    help="Operate inside this network namespace (default: the current one).",
)


@click.group()
def net() -> None:
    """Lossless network: PFC/ETS/DSCP/ECN, addresses, routes, MTU (no daemon needed)."""


def _load(path: str) -> NetConfig:
    return load_config(path)


def _plan_text(plan: Plan) -> str:
    lines = []
    if not plan.changes and not plan.blockers:
        lines.append("nothing to do: the system matches the config")
    for i, c in enumerate(plan.changes, 1):
        mark = "  [management path]" if c.risky else ""
        lines.append(f"{i:3}. {c.describe()}{mark}")
    lines += [f"blocked: {b['message']}" for b in plan.blockers]
    lines += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(lines)


def _show_data(obs: Any) -> dict[str, Any]:
    from nodeos.net.dcb import DcbState

    dcb_out: dict[str, Any] = {}
    for name, st in obs.dcb.items():
        dcb_out[name] = asdict(st) if isinstance(st, DcbState) else {"unsupported": st}
        if isinstance(st, DcbState):
            dcb_out[name].pop("maxrate", None)
            dcb_out[name].pop("extra", None)
    return {
        "links": [asdict(v) for v in obs.links.values()],
        "routes": [asdict(r) for r in obs.routes],
        "sysctls": obs.sysctls,
        "available_congestion_control": list(obs.available_cc),
        "dcb": dcb_out,
        "rdma": [p.to_dict() for p in obs.rdma_ports],
        "roce_tos": obs.roce_tos,
        "dcb_agents": obs.dcb_agents,
    }


def _show_text(d: dict[str, Any]) -> str:
    rows = [
        {
            "name": ln["name"],
            "state": "up" if ln["up"] else "down",
            "oper": ln["operstate"],
            "mtu": ln["mtu"],
            "qdisc": ln["qdisc"],
            "addresses": " ".join(ln["addresses"]),
        }
        for ln in d["links"]
    ]
    out = [table(rows, ["name", "state", "oper", "mtu", "qdisc", "addresses"]), ""]
    out.append("sysctls: " + ", ".join(f"{k}={v}" for k, v in d["sysctls"].items()))
    for name, st in d["dcb"].items():
        if "unsupported" in st:
            out.append(f"dcb {name}: {st['unsupported']}")
        else:
            ets, pfc = st.get("ets") or {}, st.get("pfc") or {}
            out.append(
                f"dcb {name}: prio_tc={ets.get('prio_tc')} tsa={ets.get('tc_tsa')} "
                f"bw={ets.get('tc_tx_bw')} pfc_en={pfc.get('pfc_en')} apps={len(st['apps'])}"
            )
    rd = [
        {
            "device": p["device"],
            "port": p["port"],
            "state": p["state"],
            "netdev": p["netdev"],
            "link": p["link_layer"],
            "roce": ",".join(p["roce_versions"]),
        }
        for p in d["rdma"]
    ]
    out += ["", "RDMA ports:", table(rd, ["device", "port", "state", "netdev", "link", "roce"])]
    if d["dcb_agents"]:
        out.append("DCB agents running: " + ", ".join(d["dcb_agents"]))
    return "\n".join(out)


@net.command()
@click.option(
    "--config",
    "config_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Limit to the interfaces of this config (and read its QoS knobs).",
)
@netns_option
@json_option
@command_runner
def show(config_path: str | None, netns: str | None, as_json: bool) -> tuple[Any, Any]:
    """Show links, addresses, routes, sysctls, DCB state and RDMA ports as they are now."""
    from nodeos.net.observe import observe

    cfg = _load(config_path) if config_path else None
    data = _show_data(observe(cfg, netns))
    return data, _show_text


@net.command()
@config_option
@netns_option
@json_option
@command_runner
def plan(config_path: str, netns: str | None, as_json: bool) -> tuple[Any, Any]:
    """List the changes `apply` would make (nothing is changed)."""
    from nodeos.net.observe import observe
    from nodeos.net.plan import make_plan

    cfg = _load(config_path)
    p = make_plan(cfg, observe(cfg, netns))
    return p.to_dict(), lambda _d: _plan_text(p)


@net.command()
@config_option
@netns_option
@click.option("--yes", is_flag=True, help="Confirm changes on the management path (for scripts).")
@json_option
@command_runner
def apply(config_path: str, netns: str | None, yes: bool, as_json: bool) -> tuple[Any, Any]:
    """Make the system match the config; roll back if the management path is lost."""
    from nodeos.net.apply import apply_plan, raise_blockers
    from nodeos.net.observe import observe
    from nodeos.net.plan import make_plan

    cfg = _load(config_path)
    p = make_plan(cfg, observe(cfg, netns))
    raise_blockers(p)
    if p.risky and not yes:
        listing = "\n".join(f"  - {c.describe()}" for c in p.risky)
        if sys.stdin.isatty() and not as_json:
            click.echo(f"These changes can cut this node off its management path:\n{listing}")
            if not click.confirm("Apply them?", default=False):
                raise BadInput("apply cancelled at the confirmation; nothing was changed", field="--yes")
        else:
            raise BadInput(
                "these changes can cut the node off its management path; nothing was "
                f"changed. Rerun with --yes to confirm:\n{listing}",
                field="--yes",
            )
    result = apply_plan(cfg, p, netns)
    data = {**result.to_dict(), "warnings": p.warnings}

    def text(_d: Any) -> str:
        if not result.applied:
            return "nothing to do: the system matches the config"
        lines = [f"applied {len(result.applied)} change(s):"]
        lines += [f"  {c.describe()}" for c in result.applied]
        lines += [f"warning: {w}" for w in p.warnings]
        return "\n".join(lines)

    return data, text


@net.command()
@config_option
@netns_option
@json_option
@click.pass_context
@command_runner
def verify(ctx: click.Context, config_path: str, netns: str | None, as_json: bool) -> None:
    """Exit 0 when the system matches the config, 3 on drift (each drifted item listed)."""
    from nodeos.net.observe import observe
    from nodeos.net.verify import verify as do_verify

    cfg = _load(config_path)
    drift, p = do_verify(cfg, observe(cfg, netns))
    data = {"in_sync": not drift, "drift": [d.to_dict() for d in drift], "warnings": p.warnings}
    if as_json:
        print_json(data)
    elif drift:
        click.echo(f"drift: {len(drift)} item(s) differ from the config")
        for d in drift:
            click.echo(f"  {d.item}: {d.message}")
    else:
        click.echo("in sync: the system matches the config")
    for w in p.warnings if not as_json else []:
        click.echo(f"warning: {w}")
    if drift:
        ctx.exit(EXIT_DRIFT)


@net.command()
@config_option
@netns_option
@click.option(
    "--interval",
    default=10.0,
    show_default=True,
    type=Seconds(maximum=3600, minimum=0.1),
    help="Seconds between counter samples and re-checks.",
)
@click.option("--count", default=None, type=click.IntRange(1), help="Stop after this many intervals.")
@json_option
@command_runner
def watch(config_path: str, netns: str | None, interval: float, count: int | None, as_json: bool) -> None:
    """Follow DCB changes, drift and PFC/ECN counters; print alarms as they happen."""
    from nodeos.net.watch import watch as do_watch

    cfg = _load(config_path)

    def emit(ev: dict[str, Any]) -> None:
        if as_json:
            click.echo(json.dumps(ev, sort_keys=True, default=str))
        elif ev["event"] == "alarm":
            click.echo(f"[{ev['severity']}] {ev['message']}")
        elif ev["event"] == "drift":
            click.echo(f"drift: {len(ev['drift'])} item(s): " + "; ".join(d["message"] for d in ev["drift"]))
        elif ev["event"] == "in_sync":
            click.echo("in sync")
        else:
            click.echo(f"{ev['event']}: {ev.get('interface', '')}")

    do_watch(cfg, emit, interval=interval, count=count, netns=netns)


@net.command()
@json_option
@command_runner
def rdma(as_json: bool) -> tuple[Any, Any]:
    """RDMA devices and ports with the net devices they ride on."""
    from nodeos.net.rdma import inventory

    ports = [p.to_dict() for p in inventory()]
    rows = [
        {
            "device": p["device"],
            "port": p["port"],
            "state": p["state"],
            "netdev": p["netdev"],
            "link": p["link_layer"],
            "roce": ",".join(p["roce_versions"]),
        }
        for p in ports
    ]
    return ports, lambda _d: table(rows, ["device", "port", "state", "netdev", "link", "roce"])
