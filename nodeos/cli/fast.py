"""The console's start-up fast path: `nodeos [--socket PATH] status [--json]` and the plain
reads scripts poll (`pool list`, `volume list`, `volume show NAME`, `host list`, `node list`,
`cluster status`, each with `--json`) without click.

Importing click (and the command modules) costs more than the interpreter's own start-up
(~3x on this host, seconds on an emulated CPU), while these are what scripts and operators run
most, often in a loop. This path parses exactly those command lines by hand and answers them
with the blocking client; any other command line, including `--help`, a human-readable read
and every typo, returns None and goes to the click group, which owns all errors and help.
Output and exit codes are the same as the click command's (nodeos.cli.render; the click
commands print `--json` results and errors the same way).
"""

from __future__ import annotations

import os
import sys

DEFAULT_SOCKET = "/run/nodeos/api.sock"


# `--json` reads: the words before `--json` -> (API method, params as the click command sends
# them, the click command's client timeout). Human output stays with the click commands.
READS: dict[tuple[str, ...], tuple[str, dict[str, str] | None, float | None]] = {
    ("pool", "list"): ("pool.list", None, None),
    ("volume", "list"): ("volume.list", None, None),
    ("host", "list"): ("host.list", None, None),
    ("node", "list"): ("node.list", None, None),
    ("cluster", "status"): ("cluster.status", {}, 60.0),
}

# (socket, method, params, as_json, client timeout): a plain tuple, since even dataclasses
# or typing would cost this path more than its own work.
FastCommand = tuple[str, str, "dict[str, str] | None", bool, "float | None"]


def _parse(argv: list[str]) -> FastCommand | None:
    """The call to make when argv is a fast command line, else None."""
    socket_path = os.environ.get("NODEOS_SOCKET") or DEFAULT_SOCKET
    args = list(argv)
    if args and args[0] == "--socket" and len(args) >= 2:
        socket_path, args = args[1], args[2:]
    elif args and args[0].startswith("--socket="):
        socket_path, args = args[0].split("=", 1)[1], args[1:]
    if not socket_path or not args:
        return None
    if args[0] == "status":
        if args[1:] in ([], ["--json"]):
            return socket_path, "status", None, args[1:] == ["--json"], None
        return None
    if len(args) < 2 or args[-1] != "--json":
        return None
    words = tuple(args[:-1])
    if words in READS:
        method, params, timeout_s = READS[words]
        return socket_path, method, params, True, timeout_s
    # A name the click command would refuse (nodeos.validate.name) is click's to report.
    if len(words) == 3 and words[:2] == ("volume", "show") and _plain_name(words[2]):
        return socket_path, "volume.show", {"name": words[2]}, True, None
    return None


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _plain_name(s: str) -> bool:
    """What nodeos.validate.name accepts (without importing re and typing)."""
    return 0 < len(s) <= 63 and s[0] not in "._-" and all(c in _NAME_CHARS for c in s)


def run(argv: list[str]) -> int | None:
    """Run argv if it is a fast command; returns its exit code, or None to use click."""
    cmd = _parse(argv)
    if cmd is None:
        return None
    socket_path, method, params, as_json, timeout_s = cmd
    from nodeos.cli.render import error_text, json_text, status_human
    from nodeos.errors import NodeosError
    from nodeos.rpc.client import Client

    try:
        data = Client(socket_path, timeout_s=timeout_s).call(method, params)
    except NodeosError as err:
        if as_json:
            print(json_text({"error": err.to_dict()}))
        else:
            print(error_text(err), file=sys.stderr)
        return err.exit_code
    print(json_text(data) if as_json else status_human(data))
    return 0
