"""The node's addresses from `ip -j addr show` (real `ip`, real interfaces of this machine)."""

from __future__ import annotations

import shutil
import socket

import pytest

from nodeos.daemon.main import default_storage_addresses
from nodeos.hw.addrs import interface_addresses


@pytest.mark.skipif(shutil.which("ip") is None, reason="no iproute2 here")
def test_loopback_and_its_address_are_listed() -> None:
    pairs = interface_addresses()
    assert ("lo", "127.0.0.1") in pairs
    names = {n for n, _ in pairs}
    assert names <= {n for _, n in socket.if_nameindex()}


@pytest.mark.skipif(shutil.which("ip") is None, reason="no iproute2 here")
def test_storage_addresses_leave_loopback_out() -> None:
    got = default_storage_addresses()
    assert "127.0.0.1" not in got and "::1" not in got
    every = {a for _, a in interface_addresses()}
    assert set(got) <= every
