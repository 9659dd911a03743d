"""Join tokens of limited uses, counted in the replicated map (pure, deterministic).

A token's key lives only on the member that issued it (nodeos/cluster/token.py), but the
count of joins made with it must hold whoever leads and however joins race: the leader
proposes `use_join_token` before it adds the joining node, and the map, applying commands one
at a time in log order, lets exactly `uses` distinct nodes through. The same node asking
again (a join retried after a lost reply) is not counted twice.

Section `join_tokens`: token id hex -> {uses, by: [node ids], expires}. Entries are dropped
once expired, by the proposer's clock carried in the command (`now`): the map reads no clock.
"""

from __future__ import annotations

from typing import Any

from nodeos.errors import BadInput

SECTION = "join_tokens"
MAX_TOKENS = 1024  # live limited tokens recorded at once (each join of one adds a few bytes)


def empty_section() -> dict[str, Any]:
    return {SECTION: {}}


def uses_of(st: dict[str, Any], token_id_hex: str) -> list[int]:
    """The nodes that joined with this token (empty if none, or unlimited, or expired)."""
    rec = (st.get(SECTION) or {}).get(token_id_hex)
    return list(rec["by"]) if isinstance(rec, dict) else []


def _num(args: dict[str, Any], field: str) -> float:
    v = args.get(field)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadInput(f"{field} must be a number", field=field)
    return float(v)


def _use_join_token_v1(st: dict[str, Any], args: dict[str, Any]) -> Any:
    tid = args.get("token_id")
    if not isinstance(tid, str) or not 0 < len(tid) <= 64:
        raise BadInput("token_id must be a token id (hex)", field="token_id")
    nid, uses = args.get("node_id"), args.get("uses")
    if type(nid) is not int or nid <= 0:
        raise BadInput("node_id must be a positive integer", field="node_id")
    if type(uses) is not int or uses < 1:
        raise BadInput("uses must be a positive integer", field="uses")
    expires, now = _num(args, "expires"), _num(args, "now")
    section = st.setdefault(SECTION, {})
    for k in [k for k, v in section.items() if float(v.get("expires", 0)) <= now]:
        del section[k]
    if expires <= now:
        raise BadInput("the join token has expired; ask a member for a new one", field="token")
    rec = section.get(tid)
    if rec is None:
        if len(section) >= MAX_TOKENS:
            raise BadInput(f"more than {MAX_TOKENS} limited join tokens in use; try later", field="token")
        rec = section[tid] = {"uses": uses, "by": [], "expires": expires}
    if nid in rec["by"]:
        return {"token_id": tid, "used": len(rec["by"]), "uses": rec["uses"]}
    if len(rec["by"]) >= rec["uses"]:
        joined = ", ".join(map(str, rec["by"]))
        times = "once" if rec["uses"] == 1 else f"{rec['uses']} times"
        raise BadInput(
            f"token already used: it allowed joining {times} and was used by node {joined}; "
            "ask a member for a new one (`nodeos cluster token`)",
            field="token",
        )
    rec["by"].append(nid)
    return {"token_id": tid, "used": len(rec["by"]), "uses": rec["uses"]}


HANDLERS = {"use_join_token": {1: _use_join_token_v1}}
