"""Shared test data for the provisioning tests: a valid document, a real SSH key line, a real
join token (made by the cluster's own encoder)."""

from __future__ import annotations

import base64
import copy
import os
import struct
import time
from typing import Any

from nodeos.cluster.token import SECRET_BYTES, TOKEN_ID_BYTES, JoinToken


def ssh_line(kind: str = "ssh-ed25519", comment: str = "ops@example") -> str:
    name = kind.encode()
    blob = struct.pack(">I", len(name)) + name + struct.pack(">I", 32) + os.urandom(32)
    return f"{kind} {base64.b64encode(blob).decode()} {comment}"


KEY = ssh_line()


def join_token() -> str:
    return JoinToken(
        "c-test",
        os.urandom(TOKEN_ID_BYTES),
        os.urandom(SECRET_BYTES),
        "198.51.100.10:7100",
        time.time() + 3600,
    ).encode()


VALID: dict[str, Any] = {
    "version": 1,
    "hostname": "s1",
    "management_address": "192.0.2.11",
    "storage_addresses": ["198.51.100.11"],
    "ntp": ["192.0.2.1", "ntp.example.net"],
    "network": {
        "interfaces": [
            {
                "name": "eno1",
                "addresses": ["192.0.2.11/24"],
                "routes": [{"dst": "0.0.0.0/0", "gateway": "192.0.2.1"}],
            },
            {"name": "ens1f0", "mtu": 9000, "addresses": ["198.51.100.11/24"]},
        ]
    },
    "ssh": {"authorized_keys": [KEY]},
    "labels": {"rack": "r1", "switch": "sw1"},
    "cluster": {"action": "join", "address": "198.51.100.10:7100", "token_file": "join.token"},
}


def valid() -> dict[str, Any]:
    return copy.deepcopy(VALID)


VALID_TOML = f"""\
version = 1
hostname = "s1"
management_address = "192.0.2.11"
storage_addresses = ["198.51.100.11"]
ntp = ["192.0.2.1", "ntp.example.net"]

[[network.interfaces]]
name = "eno1"
addresses = ["192.0.2.11/24"]
routes = [{{ dst = "0.0.0.0/0", gateway = "192.0.2.1" }}]

[[network.interfaces]]
name = "ens1f0"
mtu = 9000
addresses = ["198.51.100.11/24"]

[ssh]
authorized_keys = ["{KEY}"]

[labels]
rack = "r1"
switch = "sw1"

[cluster]
action = "join"
address = "198.51.100.10:7100"
token_file = "join.token"
"""
