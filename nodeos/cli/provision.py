"""`nodeos provision ...`: check a configuration file, show what was applied from which source,
and apply (the entry point of systemd/nodeos-provision*.service). docs/provisioning.md."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

import click

from nodeos.cli.output import command_runner, json_option
from nodeos.errors import BadInput

DEFAULT_STATE_DIR = "/var/lib/nodeos"


@click.group()
def provision() -> None:
    """First-boot configuration: check a file, show what was applied, apply (the boot units)."""


def _plan_human(d: dict[str, Any]) -> str:
    lines = [f"hostname    {d.get('hostname') or '(unchanged)'}"]
    for i in d.get("interfaces") or []:
        routes = ", ".join(f"{r['dst']} via {r.get('gateway') or 'link'}" for r in i.get("routes") or [])
        mtu = f" mtu {i['mtu']}" if i.get("mtu") else ""
        lines.append(
            f"interface   {i['name']}{mtu} {' '.join(i.get('addresses') or [])}"
            + (f" routes {routes}" if routes else "")
        )
    if d.get("management_address"):
        lines.append(f"management  {d['management_address']} ({d.get('management_interface')})")
    if d.get("storage_addresses"):
        lines.append(f"storage     {' '.join(d['storage_addresses'])}   peers {d.get('peer_listen')}")
    if d.get("ntp"):
        lines.append(f"ntp         {' '.join(d['ntp'])}")
    if d.get("ssh_keys"):
        lines.append(f"ssh keys    {len(d['ssh_keys'])}")
    if d.get("labels"):
        lines.append("labels      " + " ".join(f"{k}={v}" for k, v in sorted(d["labels"].items())))
    cl = d.get("cluster")
    if cl:
        token = cl.get("token_file") or f"credential {cl.get('token_credential')}"
        how = f" {cl.get('address')} (token from {token})"
        lines.append(f"cluster     {cl['action']}{how if cl['action'] == 'join' else ''}")
    return "\n".join(lines)


@provision.command("check")
@click.argument("file", required=False)
@click.option(
    "--cmdline",
    default=None,
    metavar="TEXT",
    help='Check kernel command line words instead of a file (e.g. "$(cat /proc/cmdline)").',
)
@json_option
@command_runner
def check(file: str | None, cmdline: str | None, as_json: bool) -> tuple[Any, Any]:
    """Check a configuration FILE (TOML; - reads stdin), or kernel command line words, and print
    what it would apply; nothing is changed. A bad field exits 2 naming the field and what is
    allowed."""
    from nodeos.provision import model, sources
    from nodeos.provision.apply import check_found

    if (file is None) == (cmdline is None):
        raise BadInput("give a FILE or --cmdline TEXT", field="file", allowed=["FILE", "--cmdline"])
    if cmdline is not None:
        found = sources.from_cmdline(cmdline)
        if found is None:
            raise BadInput(
                "no provisioning words (nodeos.hostname=..., see docs/provisioning.md)",
                field="cmdline",
                allowed=list(sources.CMDLINE_KEYS),
            )
        return check_found(found).to_dict(), lambda d: "valid\n" + _plan_human(d)
    try:
        text = sys.stdin.read() if file == "-" else Path(str(file)).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read {file}: {exc}", field="file", allowed="a readable TOML file") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(
            f"{file} is not valid TOML: {exc}", field="config", allowed="a TOML document"
        ) from None
    base = str(Path(str(file)).resolve().parent) if file != "-" else str(Path.cwd())
    plan = model.parse(doc, base).to_dict()
    return plan, lambda d: "valid\n" + _plan_human(d)


@provision.command("show")
@click.option("--state-dir", default=DEFAULT_STATE_DIR, show_default=True, help="The node's state directory.")
@json_option
@command_runner
def show(state_dir: str, as_json: bool) -> tuple[Any, Any]:
    """What provisioning last found, from which source, what it applied and the cluster step."""
    from nodeos.provision import state

    return state.load(state_dir), _show_human


def _show_human(st: dict[str, Any]) -> str:
    if not st:
        return "never provisioned"
    lines = [f"last check  {st.get('result')} from {st.get('source') or '(no source)'}"]
    err = st.get("error")
    if err:
        allowed = f"; allowed: {err['allowed']}" if err.get("allowed") is not None else ""
        lines.append(f"ERROR       {err.get('message')} (field: {err.get('field')}){allowed}")
    for ign in st.get("ignored") or []:
        lines.append(f"ignored     {ign} (a source before it is used)")
    applied = st.get("applied")
    if applied:
        lines.append(f"applied     from {applied['source']} ({applied.get('where')})")
        lines.append(_plan_human(applied.get("plan") or {}))
        lines.append("files       " + " ".join("/" + f for f in applied.get("files") or []))
    cl = st.get("cluster")
    if cl:
        what = f"{cl.get('action')}: {cl.get('state')}"
        if cl.get("cluster_id"):
            what += f" (cluster {cl['cluster_id']}, node {cl.get('node_id')})"
        if cl.get("error"):
            what += f": {cl['error'].get('message')}"
        lines.append(f"cluster     {what}")
    return "\n".join(lines)


@provision.command("apply")
@click.option(
    "--phase",
    type=click.Choice(["system", "cluster"]),
    required=True,
    help="system: files, before the network and nodeosd; cluster: init/join and labels, after nodeosd.",
)
@click.option("--root", default="/", show_default=True, help="Write the files under this root.")
@click.option("--state-dir", default=DEFAULT_STATE_DIR, show_default=True, help="The node's state directory.")
@click.option(
    "--credentials-dir",
    default=None,
    help="Credentials directory (default: $CREDENTIALS_DIRECTORY, else /run/credentials/@system).",
)
@click.option(
    "--partition-dir",
    default=None,
    help="An already mounted config partition (default: find LABEL=NODEOS-CFG and mount it).",
)
@click.option("--cmdline-file", default="/proc/cmdline", show_default=True, help="The kernel command line.")
@click.option(
    "--runtime-dir",
    default="/run/nodeos-provision",
    show_default=True,
    help="Root-only runtime directory (the staged join token).",
)
@json_option
@click.pass_context
@command_runner
def apply(
    ctx: click.Context,
    phase: str,
    root: str,
    state_dir: str,
    credentials_dir: str | None,
    partition_dir: str | None,
    cmdline_file: str,
    runtime_dir: str,
    as_json: bool,
) -> tuple[Any, Any]:
    """Apply this node's configuration (what the boot units run): the first source present of
    a systemd credential, the config partition, the kernel command line."""
    from nodeos.provision import apply as ap
    from nodeos.provision import sources

    if phase == "cluster":
        from nodeos.rpc.client import Client

        sock = (ctx.find_root().obj or {}).get("socket", "/run/nodeos/api.sock")
        out = ap.apply_cluster(Path(state_dir), Client(sock, timeout_s=120.0), runtime_dir=Path(runtime_dir))
        return out.to_dict(), _outcome_human
    creds = credentials_dir or sources.credentials_dir()
    cmdline = Path(cmdline_file).read_text() if Path(cmdline_file).exists() else ""
    cred = sources.from_credentials(creds)

    # The partition is looked for only when no credential is there: it is never mounted for nothing.
    def apply(candidates: list[Any]) -> dict[str, Any]:
        found, ignored = sources.choose(candidates)
        out = ap.apply_system(
            Path(root),
            Path(state_dir),
            found,
            ignored,
            creds_dir=creds,
            runtime_dir=Path(runtime_dir),
            effects=root == "/",
        )
        return out.to_dict()

    if partition_dir is not None or cred is not None:
        return apply(
            [cred, sources.from_partition(partition_dir), sources.from_cmdline(cmdline)]
        ), _outcome_human
    with sources.mounted_partition(sources.partition_device()) as part:
        return apply([None, part, sources.from_cmdline(cmdline)]), _outcome_human


def _outcome_human(d: dict[str, Any]) -> str:
    head = f"provisioning: {d['result']}" + (f" from {d['source']}" if d.get("source") else "")
    return "\n".join(
        [head, *(f"  {c}" for c in d.get("changed") or []), *(f"  {n}" for n in d.get("notes") or [])]
    )
