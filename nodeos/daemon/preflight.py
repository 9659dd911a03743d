"""Checks of nodeosd's configuration against the machine, before anything is created.

`config.check` looks at the values alone; these look at what is there: a state dir that names a
regular file, an API socket whose directory is a file, a peer address already taken by another
process. They are mistakes in the configuration (exit 2, field named), so they are found before
the state dir, its lock or the node's identity are made: a refused start changes nothing.
The real bind later can still lose a race for the port; nodeos/cluster/service.py reports that
one the same way.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

from nodeos import validate
from nodeos.errors import BadInput, EnvironmentProblem

from .config import Config

PORT_ALLOWED = "a free TCP port on an address of this machine"


def check(cfg: Config) -> None:
    """Raise BadInput naming the field when the machine cannot take the configuration as it is."""
    directory(Path(cfg.state_dir), "state_dir")
    directory(Path(cfg.api_socket).parent, "api_socket", named=cfg.api_socket)
    if cfg.peer_listen is not None:
        port_free(cfg.peer_listen, "peer_listen")


def _kind(path: Path) -> str:
    if path.is_symlink() and not path.exists():
        return "a dangling symbolic link"
    if path.is_file():
        return "a regular file"
    return "not a directory"


def directory(path: Path, field: str, named: str | None = None) -> None:
    """`path` is a directory, or can be made: every part of it that exists is a directory.
    `named`: what the operator gave, when that is not `path` itself (a socket in it)."""
    p = path
    while not os.path.lexists(p):
        if p.parent == p:
            return
        p = p.parent
    if p.is_dir():
        return
    shown = named or str(path)
    where = f"{shown} is" if named is None and p == path else f"{shown}: {p} is"
    raise BadInput(
        f"{field} {where} {_kind(p)}, not a directory",
        field=field,
        allowed="a directory, or a path where one can be made",
    )


def port_free(value: str, field: str) -> None:
    """Bind HOST:PORT once and let it go: taken by another process, or not this machine's address."""
    host, port = validate.host_port(value, field)
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise BadInput(f"{field} {value}: cannot resolve {host!r}: {exc.strerror}", field=field) from None
    for family, kind, proto, _, addr in infos:
        with socket.socket(family, kind, proto) as s:
            # As the listener will bind (asyncio's reuse_address): a port in TIME_WAIT is free.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(addr)
            except OSError as exc:
                raise bind_error(value, field, exc) from None


def bind_error(value: str, field: str, exc: OSError) -> BadInput | EnvironmentProblem:
    """What a failed bind of `field` means to an operator."""
    if exc.errno == errno.EADDRINUSE:
        return BadInput(
            f"{field} {value} is already in use by another process", field=field, allowed=PORT_ALLOWED
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return BadInput(
            f"{field} {value} is not an address of this machine", field=field, allowed=PORT_ALLOWED
        )
    return EnvironmentProblem(f"cannot listen on {field} {value}: {exc.strerror or exc}", field=field)
