"""Leader-only operations of the cluster service: commands, linearizable reads, join, remove.

Each runs on the node that is the leader (the service forwards to it) and raises NotLeader,
having done nothing, when this node is not (or no longer) the leader.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from nodeos import validate
from nodeos.cluster import features
from nodeos.cluster.driver import RaftDriver
from nodeos.cluster.errors import NotLeader
from nodeos.cluster.map import ROLES, encode_command
from nodeos.cluster.raft import ConfChangeType, StateRole
from nodeos.errors import AlreadyExists, BadInput, NotFound


def int_param(params: dict[str, Any], field: str, required: bool = False) -> int | None:
    v = params.get(field)
    if v is None and not required:
        return None
    if type(v) is not int or not 0 < v < 2**63:
        raise BadInput(f"{field} must be a positive integer", field=field)
    return v


def str_param(params: dict[str, Any], field: str, max_len: int = 256) -> str:
    v = params.get(field)
    if not isinstance(v, str) or not v or len(v) > max_len:
        raise BadInput(f"{field} must be a non-empty string", field=field)
    return v


# Leader-side handlers other services register (e.g. "control": the volume/pool/host API);
# each gets (driver, params, timeout) on the leader.
LeaderHandler = Callable[[RaftDriver, dict[str, Any], float], Awaitable[Any]]


async def leader_call(
    d: RaftDriver,
    method: str,
    params: dict[str, Any],
    timeout: float,
    handlers: dict[str, LeaderHandler] | None = None,
) -> Any:
    """Run one leader-only operation on this node, which must be the leader."""
    if d.role is not StateRole.LEADER:
        raise NotLeader(f"node {d.id} is not the leader")
    handler = (handlers or {}).get(method)
    if handler is not None:
        return await handler(d, params, timeout)
    if method == "command":
        return await d.propose(encode_command(params["cmd"], params.get("args") or {}), timeout)
    if method == "kv_get":
        await d.read_barrier(min(timeout, 5.0))
        return {"key": params["key"], "value": d.map.kv_get(params["key"])}
    if method == "join":
        return await leader_join(d, params, timeout)
    if method == "remove":
        return await leader_remove(d, params, timeout)
    raise BadInput(f"unknown cluster method {method!r}", field="method")


async def leader_join(d: RaftDriver, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    nid = int_param(params, "node_id", required=True)
    assert nid is not None
    addr = (params.get("addresses") or {}).get("peer")
    validate.host_port(addr, "address")
    if params.get("role", "storage") not in ROLES:
        raise BadInput("role is not allowed", field="role", allowed=list(ROLES))
    existing = d.map.nodes.get(nid)
    in_raft = nid in d.conf_state.voters or nid in d.conf_state.learners
    if existing is not None and (existing.get("addresses") or {}).get("peer") != addr:
        raise AlreadyExists(f"node id {nid} is already taken by another node", field="node_id")
    if existing is None and in_raft:
        raise AlreadyExists(f"node id {nid} is already taken", field="node_id")
    if params.get("rejoin") and (existing is not None or in_raft):
        # A member left behind by a secret roll comes back with an empty log: only as a new member.
        raise AlreadyExists(
            f"node {nid} is still a member: remove it first (`nodeos cluster remove {nid}` on a member)",
            field="node_id",
        )
    features.check_join(d.map.state, nid, params)  # its release could not apply the log
    use = params.pop("token_use", None)  # a token of limited uses: counted before the node is added
    if isinstance(use, dict):
        await d.propose(encode_command("use_join_token", {**use, "node_id": nid}), timeout)
    if existing is None:
        await d.propose(encode_command("add_node", params), timeout)
    if not in_raft:
        await d.propose_conf_change(ConfChangeType.ADD_LEARNER, nid, timeout)
    members = {k: (v.get("addresses") or {}).get("peer") for k, v in d.map.nodes.items() if k != nid}
    return {"cluster_id": d.map.state["cluster_id"], "leader": d.id, "members": members}


async def leader_remove(d: RaftDriver, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    nid = int_param(params, "node_id", required=True)
    assert nid is not None
    if nid == d.id:
        # A leader does not remove itself: it hands over first (see api_leave).
        raise NotLeader("the leader is leaving; retry at the next leader")
    held = sorted(p["name"] for p in d.map.state["pools"].values() if p["node"] == nid)
    if held:
        raise BadInput(f"node {nid} still holds pools {', '.join(held)}; delete them first", field="node_id")
    in_raft = nid in d.conf_state.voters or nid in d.conf_state.learners
    if not in_raft and nid not in d.map.nodes:
        raise NotFound(f"node {nid} is not a member", field="node_id")
    if in_raft:
        await d.propose_conf_change(ConfChangeType.REMOVE, nid, timeout)
    if nid in d.map.nodes:
        await d.propose(encode_command("remove_node", {"node_id": nid}), timeout)
    return {"removed": nid}
