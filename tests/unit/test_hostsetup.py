"""The GPU node's nvme-stas set-up as nodeos ships it (nodeos/hostsetup/): what an operator
copying it to a host relies on, read the way nvme-stas reads it (an INI file)."""

from __future__ import annotations

import configparser

import pytest

from nodeos.hostsetup import STAS_FILES, stas_file


def _ini(name: str) -> configparser.ConfigParser:
    c = configparser.ConfigParser(interpolation=None)
    c.read_string(stas_file(name))
    return c


def test_no_storage_address_is_configured_the_cluster_is_found_over_mdns() -> None:
    for name in STAS_FILES:
        c = _ini(name)
        assert not c.has_option("Controllers", "controller"), name
    assert _ini("stafd.conf").get("Service Discovery", "zeroconf") == "enabled"
    assert _ini("stafd.conf").getboolean(
        "Discovery controller connection management", "persistent-connections"
    )


def test_paths_follow_failover_and_outlast_a_reboot() -> None:
    g = _ini("stacd.conf")["Global"]
    # docs/operations.md, "Host settings": a dead path noticed within 5 s; retried for longer
    # than a storage node's reboot (a lab VM under TCG took 93 s).
    assert int(g["kato"]) <= 5
    assert int(g["reconnect-delay"]) <= 2
    assert int(g["ctrl-loss-tmo"]) == -1 or int(g["ctrl-loss-tmo"]) >= 300
    # Only stas's own connections are dropped when they leave the log (a revoke, a move).
    assert _ini("stacd.conf").get("I/O controller connection management", "disconnect-scope") == (
        "only-stas-connections"
    )


def test_an_unknown_file_is_refused_naming_the_ones_there_are() -> None:
    with pytest.raises(KeyError, match=r"stafd\.conf"):
        stas_file("stas.conf")
