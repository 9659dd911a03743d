"""TLS PSKs of subsystems' hosts on the SPDK target.

SPDK keeps a host's PSK in its TCP transport, per (subsystem, host), as a keyring key name
(`nvmf_subsystem_add_host --psk`). `nvmf_get_subsystems` does not show it (only DH-HMAC-CHAP
key names), so which PSK a host has is read from `framework_get_config nvmf` (what SPDK would
replay: its `nvmf_subsystem_add_host` entries carry `psk`), once per RPC connection (a target
reached on a new connection may have restarted), and kept up to date as exports change it.
A host whose PSK changes is removed and added again: SPDK refuses a second PSK for the same
identity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Table = dict[tuple[str, str], str]  # (subsystem NQN, host NQN) -> keyring key name


def psk_table(config: Any) -> Table:
    """The PSK key names in a `framework_get_config nvmf` answer (pure)."""
    out: Table = {}
    for entry in config if isinstance(config, list) else []:
        if not isinstance(entry, dict) or entry.get("method") != "nvmf_subsystem_add_host":
            continue
        p = entry.get("params") or {}
        if p.get("psk") and p.get("nqn") and p.get("host"):
            out[(str(p["nqn"]), str(p["host"]))] = str(p["psk"])
    return out


class PskTable:
    """The table as last read or set, and the RPC connection it holds for."""

    def __init__(self) -> None:
        self.connection: int | None = None
        self.table: Table = {}

    def get(self, connection: int, read: Callable[[], Any]) -> Table:
        """The table for RPC connection `connection`; `read()` answers `framework_get_config
        nvmf`, asked only when the table does not hold for that connection."""
        if self.connection != connection:
            config = read()
            if config is None:  # not read: nothing is assumed, and it is asked again
                return {}
            self.connection, self.table = connection, psk_table(config)
        return self.table

    def forget(self) -> None:
        """A change may or may not have been made (an error): read again next time."""
        self.connection = None
