"""The console's start-up fast path: `nodeos [--socket PATH] status [--json]` without click.

Importing click (and the command modules) costs more than the interpreter's own start-up,
while `status` is what scripts and operators run most. This path parses exactly that command
line by hand and answers it with the blocking client; any other command line, including
`--help` and every typo, returns None and goes to the click group, which owns all errors
and help. Output and exit codes are the same as the click command's (nodeos.cli.render).
"""

from __future__ import annotations

import os
import sys

DEFAULT_SOCKET = "/run/nodeos/api.sock"


def _parse(argv: list[str]) -> tuple[str, bool] | None:
    """(socket, as_json) when argv is a plain status command, else None."""
    socket_path = os.environ.get("NODEOS_SOCKET") or DEFAULT_SOCKET
    args = list(argv)
    if args and args[0] == "--socket" and len(args) >= 2:
        socket_path, args = args[1], args[2:]
    elif args and args[0].startswith("--socket="):
        socket_path, args = args[0].split("=", 1)[1], args[1:]
    if not socket_path or not args or args[0] != "status":
        return None
    rest = args[1:]
    if rest == []:
        return socket_path, False
    if rest == ["--json"]:
        return socket_path, True
    return None


def run(argv: list[str]) -> int | None:
    """Run argv if it is a fast command; returns its exit code, or None to use click."""
    parsed = _parse(argv)
    if parsed is None:
        return None
    socket_path, as_json = parsed
    from nodeos.cli.render import error_text, json_text, status_human
    from nodeos.errors import NodeosError
    from nodeos.rpc.client import Client

    try:
        data = Client(socket_path).call("status")
    except NodeosError as err:
        if as_json:
            print(json_text({"error": err.to_dict()}))
        else:
            print(error_text(err), file=sys.stderr)
        return err.exit_code
    print(json_text(data) if as_json else status_human(data))
    return 0
