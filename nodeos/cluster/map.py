"""The replicated cluster map: a pure, deterministic state machine fed by committed entries.

Every node applies the same committed commands in the same order and so holds the same
map. A command is a msgpack map `{"cmd": name, "v": version, "args": {...}}`, one of those
listed in nodeos/cluster/commands.py (the handlers below and in the modules they gather are
checked against that list). Nothing
here reads a clock, a random source or the environment: the result of `apply` depends
only on the map and the command, so a rejected command (bad argument) is rejected
identically everywhere and recorded in the map. A command this release does not know (name,
version or feature level: nodeos/cluster/features.py) is never skipped: the map stops applying
there (`stalled`) until a newer release re-applies the log from that entry.

Sections: nodes, failure domains, drives, volumes, replica placement, host grants and
path states (the last five are filled by later commands), the event log (cluster/events.py),
plus a generic key/value space used by tests and operators (`nodeos cluster kv`).

The only outside input besides the command is `at`, the time the leader stamped on the entry
when it proposed it (the proposer's clock, carried in the log): events take it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import msgpack

from nodeos.cluster import (
    commands,
    feature_map,
    features,
    request_log,
    secretroll,
    token_map,
    upgrade_map,
    voters,
)
from nodeos.cluster import events as map_events
from nodeos.errors import AlreadyExists, BadInput, NodeosError, NotFound
from nodeos.storage import (
    create_replace_map,
    failover_handlers,
    host_map,
    pool_index,
    publish_map,
    replace_map,
    snapshot_map,
    storage_import,
    storage_map,
    upgrade_release,
)

# 2: storage sections (storage_map.SECTIONS) and node labels/state. A version-1 snapshot is
# read as version 2 with those sections empty.
SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)
ROLES = ("storage", "witness")
MAX_REJECTED = 64  # rejections kept in the map for operators (oldest dropped)
MAX_KV_KEY = 256
MAX_KV_VALUE = 64 * 1024


def encode_command(cmd: str, args: dict[str, Any], v: int = 1, rid: str | None = None) -> bytes:
    """`rid`: a console request's id, applied once however often it is proposed (request_log)."""
    obj: dict[str, Any] = {"cmd": cmd, "v": v, "args": args}
    if rid is not None:
        obj["rid"] = rid
    return msgpack.packb(obj, use_bin_type=True)


def encode_current(st: dict[str, Any], cmd: str, args: dict[str, Any]) -> bytes:
    """A command as a leader proposes it: at the newest version the cluster's feature level
    allows (features.version_for), so every member can apply it."""
    return encode_command(cmd, args, features.version_for(st, cmd))


def decode_command(data: bytes) -> dict[str, Any]:
    """Decode a command; BadInput if it is not a well-formed command map."""
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:
        raise BadInput(f"command does not decode as msgpack: {exc}", field="command") from None
    if not isinstance(obj, dict):
        raise BadInput("command must be a map", field="command")
    if not isinstance(obj.get("cmd"), str):
        raise BadInput("command field 'cmd' must be a string", field="cmd", allowed=list(commands.NAMES))
    if type(obj.get("v")) is not int:
        raise BadInput("command field 'v' must be an int", field="v")
    if not isinstance(obj.get("args", {}), dict):
        raise BadInput("command field 'args' must be a map", field="args")
    if "rid" in obj:
        request_log.check_id(obj["rid"])
    return obj


def _empty_state() -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "cluster_id": None,
        "applied_index": 0,
        "nodes": {},
        "failure_domains": {},
        "drives": {},
        "volumes": {},
        "placement": {},
        "hosts": {},
        "paths": {},
        "reports": {},
        "pools": {},
        "snapshots": {},
        "published": {},  # published volumes (nodeos/storage/publish_map.py)
        "names": {},
        "kv": {},
        "rejected": [],
        "secret": secretroll.empty_section(),  # the cluster secret's generation (never the secret)
        "ca": secretroll.empty_section(),  # the cluster CA's generation and certificate fingerprint
        **map_events.empty_section(),
        **request_log.empty_section(),
        **token_map.empty_section(),  # uses of join tokens of limited uses (never their keys)
    }


def _node_id(args: dict[str, Any]) -> int:
    return _member_id(args, "node_id")


def _member_id(args: dict[str, Any], name: str) -> int:
    nid = args.get(name)
    if type(nid) is not int or nid <= 0:
        raise BadInput(f"{name} must be a positive integer", field=name)
    return nid


def _str_arg(args: dict[str, Any], field: str, max_len: int = 256, required: bool = True) -> str | None:
    v = args.get(field)
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v or len(v) > max_len:
        raise BadInput(f"{field} must be a non-empty string of at most {max_len} characters", field=field)
    return v


class ClusterMap:
    """`known_level`: the feature level this node's release knows (features.LEVEL; lower only in
    tests that make a node behave as an older release). `stalled`: set, on this node only, once
    a committed entry or a snapshot it cannot read stopped it applying (features.stall_for)."""

    def __init__(self, known_level: int = features.LEVEL) -> None:
        self.state: dict[str, Any] = _empty_state()
        self.known_level = known_level
        self.stalled: dict[str, Any] | None = None
        self.pool_index = pool_index.PoolIndex()  # derived from state, for the room check
        # Committed entries whose arguments break their command's typed record, on this node
        # (not in the state: observed, never acted on; commands.nonconforming says why): the
        # last MAX_REJECTED, and how many this process applied (`cluster status`, /metrics).
        self.nonconforming: list[dict[str, Any]] = []
        self.nonconforming_total = 0

    # --- reading ---
    @property
    def applied_index(self) -> int:
        return int(self.state["applied_index"])

    @property
    def nodes(self) -> dict[int, dict[str, Any]]:
        return self.state["nodes"]

    def voter_policy(self) -> voters.Policy:
        return voters.policy_of(self.state)

    def event_seq(self) -> int:
        return map_events.next_seq(self.state)

    def observed(self, last: int = 5) -> dict[str, Any]:
        """What `cluster status` shows of the entries this map did not take as written: commands
        the handler refused (`rejected`, in the map, the same on every node) and entries whose
        arguments broke their typed record (`nonconforming`, this node since nodeosd started)."""
        return {
            "rejected_commands": len(self.state["rejected"]),
            "rejected": self.state["rejected"][-last:],
            "nonconforming_commands": self.nonconforming_total,
            "nonconforming": self.nonconforming[-last:],
        }

    def kv_get(self, key: str) -> Any:
        rec = self.state["kv"].get(key)
        return None if rec is None else rec["value"]

    # --- applying ---
    def new_events(self, since_seq: int) -> list[dict[str, Any]]:
        """Events appended with seq >= since_seq (what the last apply recorded, for the journal)."""
        return list(map_events.appended_since(self.state, since_seq))

    def apply(self, index: int, data: bytes, at: float | None = None) -> dict[str, Any]:
        """Apply one committed command at log position `index`; returns `{result}` or `{error}`.

        Empty data (the leader's no-op entry of a new term) only advances applied_index. `at`
        is the proposer's time for the entry: the events the command records carry it.
        """
        if index <= self.state["applied_index"]:
            # Already applied (e.g. replayed after a restart from an older snapshot point).
            return {"error": {"code": "failed", "message": f"entry {index} already applied"}}
        if self.stalled is not None:
            # Stopped at an entry this release cannot apply: nothing after it is applied either,
            # and applied_index stays before it, so a restart with a newer release resumes there.
            return {"error": {"code": "not_supported", "message": self.stalled["message"]}}
        cmd: dict[str, Any] | None = None
        if data:
            try:
                cmd = decode_command(data)
            except NodeosError as err:
                return self._rejected(index, err, None)
            stall = features.stall_for(index, cmd["cmd"], cmd["v"], self.known_level)
            if stall is not None:
                self.stalled = stall
                return {"error": {"code": "not_supported", "message": stall["message"]}}
        self.state["applied_index"] = index
        if cmd is None:
            return {"result": None}
        rid: str | None = cmd.get("rid")
        try:
            seen = None if rid is None else request_log.recorded(self.state, rid)
            if seen is not None:  # asked again after an unknown outcome: answered, not applied
                return {k: seen[k] for k in ("result", "error") if k in seen}
            spec = commands.lookup(cmd["cmd"], cmd["v"])
            why = commands.nonconforming(spec, cmd.get("args", {}))
            if why is not None:
                self.nonconforming.append({"index": index, "cmd": spec.name, "v": spec.version, "why": why})
                self.nonconforming_total += 1
                del self.nonconforming[:-MAX_REJECTED]
            fn = HANDLERS[spec.name][spec.version]
            first = map_events.next_seq(self.state)
            token = pool_index.ACTIVE.set((self.state, self.pool_index))
            try:
                result = fn(self.state, cmd.get("args", {}))
            finally:
                pool_index.ACTIVE.reset(token)
            self.pool_index.after(self.state, spec.name, cmd.get("args", {}))
            map_events.stamp(self.state, first, at)
            outcome: dict[str, Any] = {"result": result}
        except NodeosError as err:
            return self._rejected(index, err, rid)
        if rid is not None:
            request_log.record(self.state, rid, index, outcome)
        return outcome

    def _rejected(self, index: int, err: NodeosError, rid: str | None) -> dict[str, Any]:
        """A command refused the same way on every node: recorded, nothing else changes."""
        self.state["applied_index"] = index
        rejected = self.state["rejected"]
        rejected.append({"index": index, "error": err.to_dict()})
        del rejected[:-MAX_REJECTED]
        outcome = {"error": err.to_dict()}
        if rid is not None:
            request_log.record(self.state, rid, index, outcome)
        return outcome

    # --- snapshots ---
    def snapshot(self) -> bytes:
        return msgpack.packb(self.state, use_bin_type=True)

    def restore(self, data: bytes, index: int | None = None) -> None:
        """The state of a snapshot; `index` (the snapshot's log index) becomes applied_index.

        A snapshot of a newer map format or feature level than this release knows is refused
        whole: the map keeps its state and stops applying (`stalled`), as for an unknown entry."""
        self.stalled = None
        self.pool_index.invalidate()
        self._restore(data, index)
        if index is not None and self.stalled is None:
            self.state["applied_index"] = index

    def _restore(self, data: bytes, index: int | None) -> None:
        if not data:
            self.state = _empty_state()
            return
        try:
            state = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as exc:
            raise BadInput(f"map snapshot does not decode: {exc}", field="snapshot") from None
        if isinstance(state, dict):
            self.stalled = features.snapshot_stall(state, index, SCHEMA_VERSION, self.known_level)
            if self.stalled is not None:
                return
        if not isinstance(state, dict) or state.get("schema") not in READABLE_SCHEMAS:
            raise BadInput(
                f"map snapshot schema {state.get('schema') if isinstance(state, dict) else None!r} "
                f"is not supported",
                field="schema",
                allowed=list(READABLE_SCHEMAS),
            )
        merged = _empty_state()
        merged.update(state)
        merged["schema"] = SCHEMA_VERSION
        for node in merged["nodes"].values():
            node.setdefault("labels", {})
            node.setdefault("state", "active")
        self.state = merged

    def copy(self) -> ClusterMap:
        out = ClusterMap(self.known_level)
        out.state = copy.deepcopy(self.state)
        out.stalled = copy.deepcopy(self.stalled)
        return out


# --- command handlers (version 1) ---------------------------------------------------------
# Each takes (state, args), validates everything before changing anything, and returns
# a msgpack-safe result.


def _init_cluster_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    cid = _str_arg(args, "cluster_id", 64)
    if st["cluster_id"] is not None and st["cluster_id"] != cid:
        raise AlreadyExists(f"cluster already has id {st['cluster_id']}", field="cluster_id")
    st["cluster_id"] = cid
    if "ca_holder" in args:  # the member whose `cluster init` made the cluster CA
        st["ca"] = {**secretroll.empty_section(), "holder": _member_id(args, "ca_holder")}
    if "feature_level" in args:  # the level a new cluster starts at (its first member's)
        lvl = args["feature_level"]
        if type(lvl) is not int or lvl < 1:
            raise BadInput("feature_level must be a positive integer", field="feature_level")
        st["feature_level"] = max(lvl, features.cluster_level(st))
    return {"cluster_id": cid}


def _add_node_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    nid = _node_id(args)
    if nid in st["nodes"]:
        raise AlreadyExists(f"node id {nid} is already taken", field="node_id")
    role = args.get("role", "storage")
    if role not in ROLES:
        raise BadInput(f"role {role!r} is not allowed", field="role", allowed=list(ROLES))
    addresses = args.get("addresses", {})
    if not isinstance(addresses, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in addresses.items()
    ):
        raise BadInput("addresses must map names (e.g. 'peer') to 'host:port' strings", field="addresses")
    fd = _str_arg(args, "failure_domain", required=False) or f"node-{nid}"
    name = _str_arg(args, "name", required=False) or f"node-{nid}"
    features.check_join(st, nid, args)  # a release that cannot apply the log is not added
    st["nodes"][nid] = {
        "id": nid,
        "name": name,
        "addresses": dict(addresses),
        "failure_domain": fd,
        "role": role,
        "labels": {},
        "state": "active",
        **features.check_report(args),  # its release and the feature level it knows
    }
    st["failure_domains"].setdefault(fd, {"name": fd})
    map_events.record(st, "node_joined", f"node {nid} ({name}) joined the cluster as {role}", node=nid)
    return st["nodes"][nid]


def _remove_node_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    nid = _node_id(args)
    if nid not in st["nodes"]:
        raise NotFound(f"node {nid} is not a member", field="node_id")
    held = sorted(p["name"] for p in st["pools"].values() if p["node"] == nid)
    if held:
        raise BadInput(f"node {nid} still holds pools {', '.join(held)}; delete them first", field="node_id")
    node = st["nodes"].pop(nid)
    st["reports"].pop(nid, None)
    _drop_unused_domain(st, node["failure_domain"])
    map_events.record(st, "node_left", f"node {nid} ({node.get('name')}) left the cluster", node=nid)
    return {"removed": nid}


def _node_update_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """New addresses of a member (e.g. a cluster of one opened to others with a peer listener)."""
    nid = _node_id(args)
    if nid not in st["nodes"]:
        raise NotFound(f"node {nid} is not a member", field="node_id")
    addresses = args.get("addresses", {})
    if not isinstance(addresses, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in addresses.items()
    ):
        raise BadInput("addresses must map names (e.g. 'peer') to 'host:port' strings", field="addresses")
    report = features.check_report(args)  # optional: what the member's release knows
    st["nodes"][nid].setdefault("addresses", {}).update(addresses)
    st["nodes"][nid].update(report)
    return st["nodes"][nid]


def _set_failure_domain_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    nid = _node_id(args)
    fd = _str_arg(args, "failure_domain")
    if nid not in st["nodes"]:
        raise NotFound(f"node {nid} is not a member", field="node_id")
    old = st["nodes"][nid]["failure_domain"]
    st["nodes"][nid]["failure_domain"] = fd
    st["failure_domains"].setdefault(fd, {"name": fd})
    _drop_unused_domain(st, old)
    return st["nodes"][nid]


def _drop_unused_domain(st: dict[str, Any], fd: str) -> None:
    if not any(n["failure_domain"] == fd for n in st["nodes"].values()):
        st["failure_domains"].pop(fd, None)


def _kv_key(args: dict[str, Any]) -> str:
    key = _str_arg(args, "key", MAX_KV_KEY)
    assert key is not None
    return key


def _kv_value(args: dict[str, Any], field: str = "value") -> Any:
    v = args.get(field)
    if not isinstance(v, (str, int, bytes)) or isinstance(v, bool):
        raise BadInput(f"{field} must be a string, an integer or bytes", field=field)
    if isinstance(v, (str, bytes)) and len(v) > MAX_KV_VALUE:
        raise BadInput(f"{field} is longer than {MAX_KV_VALUE}", field=field)
    return v


def check_kv_args(args: dict[str, Any], with_expect: bool = False) -> None:
    """Validate kv arguments before proposing, so bad input never reaches the log."""
    _kv_key(args)
    _kv_value(args)
    if with_expect and args.get("expect") is not None:
        _kv_value(args, "expect")


def _kv_put_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    key, value = _kv_key(args), _kv_value(args)
    st["kv"][key] = {"value": value, "revision": st["applied_index"]}
    return {"key": key, "value": value, "revision": st["applied_index"]}


def _kv_cas_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Set `value` only if the current value equals `expect` (None: the key is absent)."""
    key, value = _kv_key(args), _kv_value(args)
    expect = args.get("expect")
    if expect is not None:
        expect = _kv_value(args, "expect")
    rec = st["kv"].get(key)
    current = None if rec is None else rec["value"]
    if current != expect:
        return {"key": key, "succeeded": False, "value": current}
    st["kv"][key] = {"value": value, "revision": st["applied_index"]}
    return {"key": key, "succeeded": True, "value": value, "revision": st["applied_index"]}


def _kv_get_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    key = _kv_key(args)
    rec = st["kv"].get(key)
    return {"key": key, "value": None if rec is None else rec["value"]}


def _kv_delete_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """Remove a key (feature level 2); `deleted` says whether it was there."""
    key = _kv_key(args)
    return {"key": key, "deleted": st["kv"].pop(key, None) is not None}


def _secret_roll_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """One step of a cluster secret roll (nodeos/cluster/secretroll.py): generation and phase."""
    new = secretroll.next_section(secretroll.section(st), args)
    st["secret"] = new
    step = "every member now dials with it" if new["phase"] == "switch" else "the old one is refused"
    map_events.record(
        st, "secret_rotated", f"cluster secret generation {new['gen']}: {step}", step=new["phase"]
    )
    return {"gen": new["gen"], "phase": new["phase"]}


def _ca_roll_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    """One step of a cluster CA roll (nodeos/cluster/caroll.py): the same steps as the secret's."""
    cur = dict(st.get("ca") or secretroll.empty_section())
    new = secretroll.next_section(cur, args)
    # `holder`: the member holding the key of the newest CA (the roll's, from its switch on).
    if new["phase"] == "switch" and "holder" in args:
        new["holder"] = _member_id(args, "holder")
    elif cur.get("holder") is not None:
        new["holder"] = cur["holder"]
    st["ca"] = new
    step = (
        "every member presents a certificate of it"
        if new["phase"] == "switch"
        else "the old CA is not trusted"
    )
    map_events.record(st, "ca_rotated", f"cluster CA generation {new['gen']}: {step}", step=new["phase"])
    return {"gen": new["gen"], "phase": new["phase"]}


HANDLERS: dict[str, dict[int, Callable[[dict[str, Any], dict[str, Any]], Any]]] = {
    "init_cluster": {1: _init_cluster_v1},
    "add_node": {1: _add_node_v1},
    "remove_node": {1: _remove_node_v1},
    "set_failure_domain": {1: _set_failure_domain_v1},
    "node_update": {1: _node_update_v1},
    "kv_put": {1: _kv_put_v1},
    "kv_cas": {1: _kv_cas_v1},
    "kv_get": {1: _kv_get_v1},
    "kv_delete": {1: _kv_delete_v1},
    "secret_roll": {1: _secret_roll_v1},
    "ca_roll": {1: _ca_roll_v1},
    **storage_map.HANDLERS,
    **host_map.HANDLERS,
    **snapshot_map.HANDLERS,
    **publish_map.HANDLERS,
    **failover_handlers.HANDLERS,
    **replace_map.HANDLERS,
    **create_replace_map.HANDLERS,
    **storage_import.HANDLERS,
    **token_map.HANDLERS,
    **voters.HANDLERS,  # cluster_set: how many voters, when one is lost
    **feature_map.HANDLERS,  # set_feature_level
    **upgrade_map.HANDLERS,  # the rolling upgrade's record
    # upgrade_step v2 (its `release` step changes in-sync sets): the storage domain applies it
    "upgrade_step": {**upgrade_map.HANDLERS["upgrade_step"], **upgrade_release.HANDLERS["upgrade_step"]},
}
map_events.register(HANDLERS)
commands.check_handlers(HANDLERS)  # the handlers are exactly the commands listed in commands.py
