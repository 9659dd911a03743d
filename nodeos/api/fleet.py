"""This node and the cluster's nodes and hosts: status, hosts, node labels and drains, events,
and the daemon's probes and test hooks."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta

from .fields import HostNqn, HostNqns, NodeRef
from .spec import Check, Method, NoParams, Reply, Request

View = dict[str, Any]
Rows = list[dict[str, Any]]


TlsPolicy = Annotated[
    Literal["required", "allowed", "off"],
    Meta(
        description="NVMe/TCP TLS for this host: required (TLS only, plain text refused), allowed "
        "(TLS or plain text), off (plain text)"
    ),
]
TlsKey = Annotated[
    str,
    Check("nodeos.tlskey:check_key"),
    Meta(
        description="TLS pre-shared key in the NVMe interchange format (NVMeTLSkey-1:..., as `nvme "
        "gen-tls-key` prints); sealed before it reaches the map; absent with a policy: the appliance "
        "makes one and answers it once"
    ),
]
TlsDerivation = Annotated[
    Literal["standard", "compat"],
    Meta(
        description="how the host derives its TLS PSK from the key: standard (NVMe/TCP, RFC 8446: SPDK, "
        "nvme-cli 2.14 and later) or compat (nvme-cli 2.13 and older, e.g. Debian 13's; kernel data "
        "plane only)"
    ),
]


class HostAdd(Request):
    """`nqn` (with optional secrets) for one host, `nqns` for several without secrets."""

    nqn: Annotated[HostNqn, Check("nodeos.validate:host_nqn", field="host")] | None = None
    nqns: HostNqns | None = None
    dhchap_secret: (
        Annotated[
            str,
            Check("nodeos.validate:dhchap_secret"),
            Meta(description="DH-HMAC-CHAP secret (DHHC-1 format); sealed before it reaches the map"),
        ]
        | None
    ) = None
    tls: TlsPolicy | None = None
    tls_key: TlsKey | None = None
    tls_derivation: TlsDerivation | None = None


class HostUpdate(Request):
    """A host's TLS: a policy, a key, or a new key made by the appliance."""

    nqn: Annotated[HostNqn, Check("nodeos.validate:host_nqn", field="host")]
    tls: TlsPolicy | None = None
    tls_key: TlsKey | None = None
    new_tls_key: Annotated[
        bool, Meta(description="the appliance makes a new TLS key and answers it once (a key rotation)")
    ] = False
    tls_derivation: TlsDerivation | None = None


class HostRemove(Request):
    nqn: Annotated[HostNqn, Check("nodeos.validate:host_nqn", field="host")]


class NodeShow(Request):
    node: NodeRef


class NodeLabel(Request):
    node: NodeRef
    set: (
        Annotated[
            dict[str, str], Check("nodeos.api.rules:labels"), Meta(description="labels to set, KEY: VALUE")
        ]
        | None
    ) = None
    remove: (
        Annotated[list[str], Check("nodeos.api.rules:labels"), Meta(description="label keys to remove")]
        | None
    ) = None


class NodeRebuildLimit(Request):
    node: NodeRef
    mbps: (
        Annotated[
            int,
            Check("nodeos.api.rules:rebuild_mbps"),
            Meta(ge=1, le=100_000, description="MB/s; absent or null: the data plane's default cap"),
        ]
        | None
    ) = None


class EventsList(Request):
    since: (
        Annotated[
            int,
            Check("nodeos.observe.events:check_since", with_field=False),
            Meta(ge=0, description="only events after this seq (0: from the oldest kept)"),
        ]
        | None
    ) = None
    scope: Annotated[
        Literal["auto", "cluster", "node"],
        Meta(description="the cluster's log, this node's, or the cluster's when there is one (auto)"),
    ] = "auto"
    limit: Annotated[int, Meta(ge=1, le=10_000, description="at most this many events")] = 1000
    follow: Annotated[bool, Meta(description="hold the request until a newer event exists")] = False
    timeout: Annotated[
        float,
        Meta(gt=0, le=300, description="how long `follow` holds the request", extra={"unit": "seconds"}),
    ] = 30.0


class Pong(Reply):
    pong: bool
    pid: int


METHODS: tuple[Method, ...] = (
    Method("status", "This node: identity, data plane, services, objects, pending operations, health.",
           NoParams, View, "node", console="status"),
    Method("daemon.ping", "Liveness: the daemon answers (with its pid).", NoParams, Pong, "node",
           why_no_console="a probe for tools that start nodeosd (the lab, the benches); `nodeos status` "
           "is the operator's"),
    Method("host.add", "Register a host by NQN (one with a DH-HMAC-CHAP secret and TLS, or several).",
           HostAdd, View, "leader", errors=("already_exists",), write=True, console="host add"),
    Method("host.update", "Change a host's TLS: its policy, its key (given, or made and answered once).",
           HostUpdate, View, "leader", errors=("not_found",), write=True, console="host update"),
    Method("host.list", "Registered hosts and the volumes granted to them (never a secret).", NoParams,
           Rows, "leader", console="host list"),
    Method("host.remove", "Forget a host that has no grants left.", HostRemove, View, "leader",
           errors=("not_found",), write=True, console="host remove"),
    Method("node.list", "The cluster's nodes: addresses, labels, role, state, capacity, health.", NoParams,
           Rows, "leader", console="node list"),
    Method("node.show", "One node, with its drives and pools.", NodeShow, View, "leader",
           errors=("not_found",), console="node show"),
    Method("node.label", "Set and remove a node's labels (its failure domains).", NodeLabel, View, "leader",
           errors=("not_found",), write=True, console="node label"),
    Method("node.drain", "Move every replica off a node; nothing new is placed there.", NodeShow, View,
           "leader", errors=("not_found",), write=True, console="node drain"),
    Method("node.undrain", "Make a drained node schedulable again.", NodeShow, View, "leader",
           errors=("not_found",), write=True, console="node undrain"),
    Method("node.rebuild_limit", "Cap a node's replica rebuilds (MB/s), or back to the default.",
           NodeRebuildLimit, View, "leader", errors=("not_found",), write=True, console="node rebuild-limit"),
    Method("node.reconcile", "Run this node's recovery and one reconcile pass now.", NoParams, View, "node",
           errors=("not_supported",), write=True,
           why_no_console="maintenance hook: the agent reconciles by itself; kept for support and tests"),
    Method("node.crash_points", "The crash points this build knows (NODEOS_CRASH_AT).", NoParams,
           list[str], "node", why_no_console="a test hook (the crash tests list what they can kill)"),
    Method("events.list", "The event log: what the cluster did and why (`follow`: a long poll).",
           EventsList, View, "node", console="events"),
)  # fmt: skip
