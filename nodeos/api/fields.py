"""Field types shared by the requests: each says its type, what it means (the API reference's
text) and, where the rule is more than a type, the validator that owns it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta

from .spec import Check

# The schemas say the rule where JSON Schema can (the OpenAPI document, generated clients); the
# Check stays the authority and words the error.
Name = Annotated[
    str,
    Check("nodeos.validate:name"),
    Meta(
        pattern="^[A-Za-z0-9][A-Za-z0-9._-]*$",
        min_length=1,
        max_length=63,
        description="1-63 characters: letters, digits, '.', '_', '-'; starting with a letter or digit",
    ),
]
SizeText = Annotated[str, Meta(pattern=r"^\s*[0-9]+(\.[0-9]+)?\s*([bB]|[kKmMgGtTpP]([iI]?[bB])?)?\s*$")]
Size = Annotated[
    Annotated[int, Meta(ge=1 << 20, le=1 << 60)] | SizeText,
    Check("nodeos.validate:size"),
    Meta(description="bytes, or a size with a unit: KiB MiB GiB TiB PiB, KB MB GB TB PB (1 MiB to 1 EiB)"),
]
HostNqn = Annotated[
    str,
    Check("nodeos.validate:host_nqn"),
    Meta(pattern=r"^nqn\.[0-9]{4}-[0-9]{2}\.[A-Za-z0-9]", max_length=223, description="a host NQN"),
]
HostNqns = Annotated[
    list[HostNqn],
    Check("nodeos.control.params:host_list"),
    Meta(min_length=1, max_length=1000, description="1 to 1000 host NQNs, one change for all"),
]
NodeRef = Annotated[
    int | str,
    Check("nodeos.api.rules:node_ref"),
    Meta(description="a node of the cluster: its name or its id"),
]
Spread = Annotated[
    Literal["node", "rack", "switch"],
    Meta(description="the failure domain level replicas are spread over (node labels); default node"),
]
Wait = Annotated[
    float,
    Meta(
        ge=0,
        le=3600,
        description="seconds the daemon waits for the change to be done before it answers (0: at once)",
        extra={"unit": "seconds"},
    ),
]
Force = Annotated[
    bool, Meta(description="go ahead although hosts may be connected or an operation is pending")
]
RaftId = Annotated[int, Meta(gt=0, le=2**63 - 1, description="a member's Raft id (a positive integer)")]
KvTimeout = Annotated[
    float,
    Meta(gt=0, le=300, description="seconds to wait for the leader (default 5)", extra={"unit": "seconds"}),
]
RollTimeout = Annotated[
    float,
    Check("nodeos.api.rules:roll_timeout"),
    Meta(
        ge=1, le=300, description="seconds to wait for every member (default 30)", extra={"unit": "seconds"}
    ),
]
KvKey = Annotated[
    str, Meta(min_length=1, max_length=256, description="a key of the cluster's key/value space")
]
KvValue = Annotated[
    Any,
    Check("nodeos.api.rules:kv_value"),
    Meta(
        description="a string (at most 64 KiB), an integer or bytes",
        extra_json_schema={"anyOf": [{"type": "string", "maxLength": 65536}, {"type": "integer"}]},
    ),
]
PciAddress = Annotated[
    str, Check("nodeos.hw.pci:check_address"), Meta(description="a PCI address such as 0000:01:00.0")
]
