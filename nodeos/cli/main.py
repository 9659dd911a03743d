"""Entry point of `nodeos`. Sub-groups live in their own modules and load lazily,
so a command that needs no daemon (e.g. `nodeos net`) never imports daemon code.

Start-up cost is most of what a short command costs, so: `nodeos status` is answered without
click at all (nodeos.cli.fast); click and the group are built on first use; `nodeos --help`
lists commands from SHORT_HELP without importing their modules."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the console's start-up
if TYPE_CHECKING:
    from typing import Any

# name -> "module:attribute" of a click command or group.
SUBCOMMANDS: dict[str, str] = {
    "status": "nodeos.cli.node:status",
    "drive": "nodeos.cli.drive:drive",
    "pool": "nodeos.cli.node:pool",
    "volume": "nodeos.cli.publish:volume",
    "host": "nodeos.cli.hosts:host",
    "node": "nodeos.cli.nodes:node",
    "cluster": "nodeos.cli.cluster:cluster",
    "net": "nodeos.cli.net:net",
    "events": "nodeos.cli.events:events",
    "auth": "nodeos.cli.auth:auth",
    "provision": "nodeos.cli.provision:provision",
}

# name -> the one-line help `nodeos --help` shows (a command missing here is imported for it).
SHORT_HELP: dict[str, str] = {
    "status": "Show this node: identity, data plane, objects, pending operations.",
    "drive": "NVMe drives of this node (kernel- or SPDK-owned): list, claim for SPDK, release.",
    "pool": "Storage pools (thin pools over drives).",
    "volume": "Thin volumes, snapshots, clones and their grants.",
    "host": "Hosts (GPU nodes) by host NQN.",
    "node": "The cluster's nodes: addresses, labels (failure domains), role, state, capacity, health.",
    "cluster": "Form, join, leave and inspect the cluster.",
    "net": "Lossless network: PFC/ETS/DSCP/ECN, addresses, routes, MTU (no daemon needed).",
    "events": "The cluster's event log: what happened and why (--follow to watch).",
    "auth": "Bearer tokens of the HTTPS REST endpoint: create (admin or read-only), list, revoke.",
    "provision": "First-boot configuration: check a file, show what was applied and from where.",
}


def _load(name: str) -> Any:
    target = SUBCOMMANDS.get(name)
    if target is None:
        return None
    import importlib

    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def _json_usage(exc: Any) -> Any:
    from nodeos.cli.output import JsonUsageError

    return JsonUsageError(exc)


def _build_cli() -> Any:
    import click

    class LazyGroup(click.Group):
        def list_commands(self, ctx: click.Context) -> list[str]:
            return sorted(SUBCOMMANDS)

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            return _load(cmd_name)  # type: ignore[no-any-return]

        # A usage error of a command line with `--json` anywhere on it is printed as the console's
        # JSON error (nodeos.cli.output.JsonUsageError): scripts parse stdout, never click's text.
        # The top group sees every error: its own parse here, its subcommands' within invoke().
        def make_context(
            self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
        ) -> click.Context:
            as_json = "--json" in args
            try:
                ctx = super().make_context(info_name, args, parent=parent, **extra)
            except click.UsageError as exc:
                if not as_json:
                    raise
                raise _json_usage(exc) from None
            ctx.meta["nodeos.as_json"] = as_json
            return ctx

        def invoke(self, ctx: click.Context) -> Any:
            try:
                return super().invoke(ctx)
            except click.UsageError as exc:
                if not ctx.meta.get("nodeos.as_json"):
                    raise
                raise _json_usage(exc) from None

        def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
            rows = []
            for name in self.list_commands(ctx):
                text = SHORT_HELP.get(name)
                if text is None:
                    cmd = _load(name)
                    text = cmd.get_short_help_str(formatter.width) if cmd is not None else ""
                rows.append((name, text))
            if rows:
                with formatter.section("Commands"):
                    formatter.write_dl(rows)

    @click.group(cls=LazyGroup)
    @click.option(
        "--socket",
        "socket_path",
        envvar="NODEOS_SOCKET",
        default="/run/nodeos/api.sock",
        show_default=True,
        help="The daemon's API socket (also NODEOS_SOCKET).",
    )
    @click.pass_context
    def cli(ctx: click.Context, socket_path: str) -> None:
        """Operate a nodeos storage node and its cluster."""
        ctx.ensure_object(dict)
        ctx.obj["socket"] = socket_path

    return cli


_cli: Any = None


def __getattr__(name: str) -> Any:
    """`nodeos.cli.main.cli`: the click group, built (and click imported) on first use."""
    global _cli
    if name == "cli":
        if _cli is None:
            _cli = _build_cli()
        return _cli
    raise AttributeError(name)


def main(argv: list[str] | None = None) -> Any:
    args = sys.argv[1:] if argv is None else list(argv)
    from nodeos.cli import fast

    try:
        code = fast.run(args)
    except BrokenPipeError:
        # The reader went away (`nodeos status --json | head -1`): exit 1 quietly, as click does,
        # and let the interpreter's last flush go to /dev/null (no traceback).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    if code is not None:
        sys.exit(code)
    import click

    from nodeos.errors import EXIT_BAD_INPUT

    cli = __getattr__("cli")
    try:
        return cli.main(args=args, prog_name="nodeos", standalone_mode=True)
    except click.exceptions.UsageError as exc:  # pragma: no cover - click exits itself
        exc.show()
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
