"""Entry point of `nodeos`. Sub-groups live in their own modules and load lazily,
so a command that needs no daemon (e.g. `nodeos net`) never imports daemon code."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from nodeos.errors import EXIT_BAD_INPUT

# name -> "module:attribute" of a click command or group.
SUBCOMMANDS: dict[str, str] = {
    "status": "nodeos.cli.node:status",
    "drive": "nodeos.cli.node:drive",
    "pool": "nodeos.cli.node:pool",
    "volume": "nodeos.cli.node:volume",
    "host": "nodeos.cli.node:host",
    "cluster": "nodeos.cli.cluster:cluster",
    "net": "nodeos.cli.net:net",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


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


def main(argv: list[str] | None = None) -> Any:
    try:
        return cli.main(args=argv, prog_name="nodeos", standalone_mode=True)
    except click.exceptions.UsageError as exc:  # pragma: no cover - click exits itself
        exc.show()
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
