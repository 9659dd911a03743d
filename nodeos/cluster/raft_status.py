"""What the Raft driver reads off its Raft node and map, as pure functions: the status report
(`nodeos cluster status`, metrics) and the addresses of the peers the transport should reach."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeos.cluster.raft import ConfState, Status

# A learner this close to the commit index counts as caught up (voters.py may promote it):
# under steady writes a learner is always a few entries behind.
PROMOTE_WINDOW = 64


def status_report(
    node_id: int,
    st: Status,
    *,
    applied: int,
    conf_state: ConfState,
    first_index: int,
    last_index: int,
    bad_messages: int,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "node_id": node_id,
        "role": st.soft_state.role.value,
        "leader": st.soft_state.leader or None,
        "term": st.hard_state.term,
        "commit": st.hard_state.commit,
        "applied": applied,
        "voters": list(conf_state.voters),
        "learners": list(conf_state.learners),
        "first_index": first_index,
        "last_index": last_index,
        "bad_messages": bad_messages,
    }
    if st.progress:
        out["progress"] = {
            nid: {
                "match": pr.match,
                "next": pr.next,
                "state": pr.state.value,
                "lag": max(0, last_index - pr.match),
                "learner": pr.is_learner,
                "active": pr.recent_active,
            }
            for nid, pr in st.progress.items()
        }
    return out


def peer_addresses(nodes: Mapping[int, Mapping[str, Any]], extra_peers: Mapping[int, str]) -> dict[int, str]:
    """Every member's peer address from the map; before the map knows any node (just joined, not
    caught up yet) the addresses the join reply gave are all there is."""
    want: dict[int, str] = {}
    if not nodes:
        want.update(extra_peers)
    for nid, node in nodes.items():
        addr = (node.get("addresses") or {}).get("peer")
        if addr:
            want[nid] = addr
    return want
