"""The Raft cluster: form, join, leave, tokens, secret and CA rolls, its key/value space."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

from .fields import KvKey, KvTimeout, KvValue, RaftId, RollTimeout
from .spec import Check, Method, NoParams, Reply, Request

View = dict[str, Any]

FailureDomain = Annotated[
    str, Meta(min_length=1, max_length=256, description="this node's failure domain (e.g. a rack)")
]
OwnId = Annotated[RaftId, Meta(description="this node's Raft id (default: from its node id)")]
Ttl = Annotated[
    int,
    Check("nodeos.cluster.token:check_ttl", with_field=False),
    Meta(ge=60, le=7 * 86400, description="seconds the join token stays valid"),
]


class ClusterInit(Request):
    node_id: OwnId | None = None
    failure_domain: FailureDomain | None = None
    ttl: Ttl | None = None
    feature_level: (
        Annotated[
            int,
            Meta(
                ge=1,
                description="the cluster feature level to start at (default: this node's; lower for "
                "a cluster that nodes of an older release will join)",
            ),
        ]
        | None
    ) = None


class ClusterJoin(Request):
    address: Annotated[
        str, Check("nodeos.validate:host_port"), Meta(description="HOST:PORT of a member's peer listener")
    ]
    token: Annotated[
        str,
        Check("nodeos.cluster.token:decode_token", with_field=False),
        Meta(description="a join token from `nodeos cluster init` or `cluster token`"),
    ]
    node_id: OwnId | None = None
    failure_domain: FailureDomain | None = None


class ClusterRemove(Request):
    node_id: RaftId


class ClusterToken(Request):
    ttl: Ttl | None = None
    uses: (
        Annotated[
            int,
            Check("nodeos.cluster.token:check_uses", with_field=False),
            Meta(ge=1, le=1000, description="joins the token allows (default: any until it expires)"),
        ]
        | None
    ) = None


class JoinTokenRevoke(Request):
    token_id: Annotated[str, Meta(min_length=1, max_length=64, description="a token id from --list")]


class Roll(Request):
    timeout: RollTimeout | None = None


class ClusterUpgrade(Request):
    bundle: Annotated[
        str, Meta(min_length=1, max_length=4096, description="path of a signed update bundle on this node")
    ]
    dry_run: Annotated[
        bool, Meta(description="check the bundle and the cluster, show the plan, change nothing")
    ] = False
    allow_downgrade: Annotated[bool, Meta(description="accept a bundle older than a member's release")] = (
        False
    )


class KvGet(Request):
    key: KvKey
    timeout: KvTimeout = 5.0


class KvPut(Request):
    key: KvKey
    value: KvValue
    timeout: KvTimeout = 5.0


class KvCas(Request):
    key: KvKey
    value: KvValue
    expect: Annotated[KvValue, Meta(description="the value the key must hold now (null: absent)")] = None
    timeout: KvTimeout = 5.0


class ClusterSet(Request):
    """At least one setting; each one absent is left as it is."""

    voters: (
        Annotated[
            int,
            Check("nodeos.api.rules:voter_policy"),
            Meta(description="how many voters the leader keeps, on distinct failure domains (3 or 5)"),
        ]
        | None
    ) = None
    voter_down_s: (
        Annotated[
            float,
            Check("nodeos.api.rules:voter_policy"),
            Meta(description="seconds a silent voter is given before it is replaced (2 to 3600)"),
        ]
        | None
    ) = None
    feature_level: (
        Annotated[
            int,
            Meta(
                ge=1,
                description="raise the cluster's feature level (every member must know it; never lowered)",
            ),
        ]
        | None
    ) = None
    timeout: KvTimeout = 5.0


class KvDelete(Request):
    key: KvKey
    timeout: KvTimeout = 5.0


class TestFault(Request):
    drop: Annotated[list[int], Meta(description="drop every message to and from these node ids")] = []


class KvRead(Reply):
    key: str
    value: Any = None


class KvWritten(Reply):
    key: str
    value: Any
    revision: int


class KvDeleted(Reply):
    key: str
    deleted: bool  # false: the key was absent


class KvSwapped(Reply):
    key: str
    succeeded: bool
    value: Any = None
    revision: int | None = None  # the entry that wrote it (absent when nothing changed)


_TEST = "a test hook, present only when nodeosd runs with NODEOS_TEST_FAULTS=1"

METHODS: tuple[Method, ...] = (
    Method("cluster.init", "Make this node's cluster joinable (or form a new one) and issue a join token.",
           ClusterInit, View, "node", errors=("already_exists",), write=True, console="cluster init"),
    Method("cluster.join", "Join the cluster a member at ADDRESS belongs to.", ClusterJoin, View, "node",
           errors=("already_exists", "peer_unreachable"), write=True, console="cluster join"),
    Method("cluster.leave", "Leave the cluster (this node becomes a cluster of one again).", NoParams, View,
           "node", write=True, console="cluster leave"),
    Method("cluster.remove", "Remove another member for good.", ClusterRemove, View, "leader", write=True,
           errors=("not_found",), console="cluster remove"),
    Method("cluster.status", "Membership, Raft state, rolls under way, transport counters.", NoParams, View,
           "node", console="cluster status"),
    Method("cluster.set", "Cluster-wide settings: how many voters, when a silent voter is replaced, "
           "the feature level.", ClusterSet, View, "leader", write=True, console="cluster set"),
    Method("cluster.token", "Issue a join token.", ClusterToken, View, "node", write=True,
           console="cluster token"),
    Method("cluster.token.list", "This member's live join tokens and who used them.", NoParams, View, "node",
           console="cluster token --list"),
    Method("cluster.token.revoke", "Revoke a join token issued by this member.", JoinTokenRevoke, View,
           "node", errors=("not_found",), write=True, console="cluster token --revoke"),
    Method("cluster.secret.rotate", "Replace the cluster secret on every member, in two phases.", Roll, View,
           "leader", write=True, console="cluster rotate-secret"),
    Method("cluster.ca.rotate", "Replace the cluster CA and every member's certificate.", Roll, View, "node",
           write=True, console="cluster rotate-ca"),
    Method("cluster.upgrade", "Upgrade every member from a signed bundle, one failure domain at a time.",
           ClusterUpgrade, View, "node", errors=("not_found", "bundle_refused", "not_supported"), write=True,
           console="cluster upgrade"),
    Method("cluster.upgrade.status", "The rolling upgrade: its state, step and why it waits.", NoParams, View,
           "leader", console="cluster upgrade --status"),
    Method("cluster.upgrade.pause", "Pause the rolling upgrade after the step under way.", NoParams, View,
           "leader", errors=("not_found",), write=True, console="cluster upgrade --pause"),
    Method("cluster.upgrade.resume", "Resume a paused or stopped rolling upgrade.", NoParams, View, "leader",
           errors=("not_found",), write=True, console="cluster upgrade --resume"),
    Method("cluster.upgrade.abort", "Give up the rolling upgrade (updated nodes stay so).", NoParams, View,
           "leader", errors=("not_found",), write=True, console="cluster upgrade --abort"),
    Method("cluster.kv.get", "Read a key of the cluster's key/value space (linearizable).", KvGet, KvRead,
           "leader", console="cluster kv get"),
    Method("cluster.kv.put", "Write a key.", KvPut, KvWritten, "leader", write=True,
           console="cluster kv put"),
    Method("cluster.kv.cas", "Write a key only if it holds the expected value.", KvCas, KvSwapped, "leader",
           write=True, console="cluster kv cas"),
    Method("cluster.kv.delete", "Remove a key (needs cluster feature level 2).", KvDelete, KvDeleted,
           "leader", errors=("not_supported",), write=True, console="cluster kv delete"),
    Method("cluster.test.fault", "Drop messages to and from some members.", TestFault, View, "node",
           write=True, why_no_console=_TEST, only_with="NODEOS_TEST_FAULTS=1"),
    Method("cluster.test.host_keys", "What this member holds of the host secrets' keys.", NoParams, View,
           "node", why_no_console=_TEST, only_with="NODEOS_TEST_FAULTS=1"),
)  # fmt: skip
