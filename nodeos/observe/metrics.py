"""Metric families from one snapshot of the node: a pure function, no I/O.

The service (nodeos/observe/service.py) gathers a snapshot, a plain dict, from small read
interfaces at each scrape, and `families(snapshot)` turns it into prometheus_client metric
families (the library writes the exposition format). Snapshot keys, all optional:

  daemon:    {version, start_time, dataplane: {name, up, reason}, api_requests, api_errors: {code: n}}
  cluster:   {member, node_id, role, leader, term, commit, applied, last_index, leader_changes,
              nonconforming (committed entries whose arguments broke their typed record),
              voters: [id], learners: [id], progress: {id: {match, lag, active}} (leader only),
              map: the cluster map state (sections read defensively: see metrics_map.py)}
  volume_io: {vol_id: {reads, writes, read_bytes, write_bytes, read_seconds, write_seconds, in_flight}}
  net:       {nic: {netdev: {ethtool stat: n}}, rdma: {"dev/port": {hw counter: n}}, drift_items: n}
  limits:    {volume_labels_max: n}

Naming follows Prometheus conventions: `nodeos_` prefix, base units in names (`_bytes`,
`_seconds`), counters end in `_total`, and every label has a bounded set of values (see
docs/observability.md for the volume label cap).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from nodeos.observe import metrics_map

DEFAULT_VOLUME_LABELS_MAX = 1000
AGGREGATED = "_aggregated"  # the volume label once there are more volumes than the cap

_PRIO_PAUSE = re.compile(r"^(rx|tx)_prio(\d)_pause$")
_PRIO_DISCARD = re.compile(r"^rx_prio(\d)_(discards|buf_discard)$")
_NIC_DISCARDS = ("rx_discards_phy", "rx_out_of_buffer", "tx_discards_phy")
_RDMA = {
    "np_ecn_marked_roce_packets": ("nodeos_net_ecn_marked_packets", "RoCE packets received with an ECN mark"),
    "np_cnp_sent": ("nodeos_net_cnp_sent", "Congestion notification packets sent (DCQCN notification point)"),
    "rp_cnp_handled": ("nodeos_net_cnp_handled", "Congestion notification packets handled (reaction point)"),
}


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    return None


def gauge(name: str, doc: str, value: Any = None, labels: list[str] | None = None) -> GaugeMetricFamily:
    if labels is not None:
        return GaugeMetricFamily(name, doc, labels=labels)
    return GaugeMetricFamily(name, doc, value=_num(value) or 0.0)


def counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels)  # the library appends _total


def families(snap: dict[str, Any]) -> list[Metric]:
    out: list[Metric] = []
    out.extend(_daemon(snap.get("daemon") or {}))
    out.extend(_cluster(snap.get("cluster")))
    limit = int((snap.get("limits") or {}).get("volume_labels_max", DEFAULT_VOLUME_LABELS_MAX))
    out.extend(_volume_io(snap.get("volume_io") or {}, limit))
    out.extend(_net(snap.get("net")))
    cluster = snap.get("cluster") or {}
    out.extend(metrics_map.families(cluster, limit))
    return out


def _daemon(d: dict[str, Any]) -> Iterator[Metric]:
    info = gauge("nodeos_build_info", "Always 1; the nodeosd version in a label", labels=["version"])
    info.add_metric([str(d.get("version", "unknown"))], 1)
    yield info
    yield gauge("nodeos_start_time_seconds", "When nodeosd started (Unix time)", d.get("start_time"))
    dp = d.get("dataplane") or {}
    dpi = gauge(
        "nodeos_dataplane_info", "Always 1; the data plane in use (kernel, spdk, none)", labels=["dataplane"]
    )
    dpi.add_metric([str(dp.get("name", "none"))], 1)
    yield dpi
    yield gauge(
        "nodeos_dataplane_up",
        "1 when the data plane answers (a witness without one reports 1: nothing is down)",
        1 if dp.get("up", True) else 0,
    )
    stuck = gauge(
        "nodeos_dataplane_calls_stuck",
        "Data plane calls past their deadline, not returned yet, by method (the node goes on without them)",
        labels=["method"],
    )
    for method in sorted(set(dp.get("stuck") or [])):
        stuck.add_metric([method], float((dp.get("stuck") or []).count(method)))
    yield stuck
    late = counter("nodeos_dataplane_calls_overdue", "Data plane calls that ever passed their deadline", [])
    late.add_metric([], float(dp.get("stuck_total") or 0))
    yield late
    req = counter("nodeos_api_requests", "Requests handled by the local API", labels=[])
    req.add_metric([], float(d.get("api_requests") or 0))
    yield req
    errs = counter("nodeos_api_errors", "Local API requests answered with an error, by error code", ["code"])
    for code, n in sorted((d.get("api_errors") or {}).items()):
        errs.add_metric([str(code)], float(n))
    yield errs
    refused = counter(
        "nodeos_api_connections_closed",
        "Local API connections refused or closed by the daemon (permission, idle, busy)",
        ["reason"],
    )
    for reason, n in sorted((d.get("api_refused") or {}).items()):
        refused.add_metric([str(reason)], float(n or 0))
    yield refused


def _cluster(c: dict[str, Any] | None) -> Iterator[Metric]:
    c = c or {}
    member = bool(c.get("member"))
    yield gauge("nodeos_cluster_member", "1 when this node belongs to a cluster", 1 if member else 0)
    if not member:
        return
    me, leader = c.get("node_id"), c.get("leader")
    yield gauge("nodeos_cluster_has_leader", "1 when this node knows a Raft leader", 1 if leader else 0)
    yield gauge("nodeos_cluster_is_leader", "1 when this node is the Raft leader", 1 if leader == me else 0)
    role = gauge("nodeos_cluster_role", "Always 1; this node's Raft role in a label", labels=["role"])
    role.add_metric([str(c.get("role", "unknown"))], 1)
    yield role
    yield gauge("nodeos_cluster_term", "Current Raft term", c.get("term"))
    yield gauge("nodeos_cluster_commit_index", "Highest log index known committed", c.get("commit"))
    yield gauge("nodeos_cluster_applied_index", "Highest log index applied to the map", c.get("applied"))
    yield gauge("nodeos_cluster_last_index", "Last index in this node's Raft log", c.get("last_index"))
    lag = max(0, int(c.get("commit") or 0) - int(c.get("applied") or 0))
    yield gauge("nodeos_cluster_apply_lag_entries", "Committed entries not yet applied here", lag)
    changes = counter(
        "nodeos_cluster_leader_changes", "Leader changes this node has seen since it started", []
    )
    changes.add_metric([], float(c.get("leader_changes") or 0))
    yield changes
    nonconforming = counter(
        "nodeos_cluster_nonconforming_commands",
        "Committed map entries applied here since nodeosd started whose arguments broke their "
        "command's typed record (observed, never acted on: `nodeos cluster status` names them)",
        [],
    )
    nonconforming.add_metric([], float(c.get("nonconforming") or 0))
    yield nonconforming
    yield from _latency(c.get("timings") or {})
    voters = c.get("voters") or []
    yield gauge("nodeos_cluster_voters", "Raft voters in this node's configuration", len(voters))
    yield gauge("nodeos_cluster_learners", "Raft learners (non-voting members)", len(c.get("learners") or []))
    progress = c.get("progress")
    if leader != me or not isinstance(progress, dict):
        return  # members' liveness is the leader's knowledge: exported by the leader only
    up = gauge(
        "nodeos_cluster_member_up", "1 when the leader heard from the member recently", labels=["member"]
    )
    mlag = gauge("nodeos_cluster_member_lag_entries", "Log entries the member is behind", labels=["member"])
    n_up = 0
    for nid, pr in sorted(progress.items(), key=lambda kv: str(kv[0])):
        ok = nid == me or bool((pr or {}).get("active"))
        n_up += ok
        up.add_metric([str(nid)], 1 if ok else 0)
        mlag.add_metric([str(nid)], float((pr or {}).get("lag") or 0))
    yield up
    yield mlag
    counts = gauge("nodeos_cluster_members", "Cluster members by liveness (leader's view)", labels=["state"])
    counts.add_metric(["up"], n_up)
    counts.add_metric(["down"], len(progress) - n_up)
    yield counts


_LATENCY = {
    "fsync": ("nodeos_cluster_fsync_seconds", "Synced Raft log writes on this node (write + fdatasync)"),
    "commit": (
        "nodeos_cluster_commit_seconds",
        "Proposals on the leader, from propose to committed and applied",
    ),
}


def _latency(timings: dict[str, Any]) -> Iterator[Metric]:
    for key, (name, doc) in _LATENCY.items():
        snap = timings.get(key)
        if not snap:
            continue
        fam = HistogramMetricFamily(name, doc)
        buckets = [(_bound(b), float(n)) for b, n in snap["buckets"]]
        fam.add_metric([], buckets, float(snap["sum"]))
        yield fam


def _bound(b: float) -> str:
    return "+Inf" if b == float("inf") else repr(float(b))


_IO_FIELDS = (
    ("reads", "nodeos_volume_reads", "Read operations completed"),
    ("writes", "nodeos_volume_writes", "Write operations completed"),
    ("read_bytes", "nodeos_volume_read_bytes", "Bytes read"),
    ("write_bytes", "nodeos_volume_written_bytes", "Bytes written"),
    (
        "read_seconds",
        "nodeos_volume_read_time_seconds",
        "Time spent on reads (divide by reads: mean latency)",
    ),
    (
        "write_seconds",
        "nodeos_volume_write_time_seconds",
        "Time spent on writes (divide by writes: mean latency)",
    ),
)


def _volume_io(io: dict[str, dict[str, Any]], limit: int) -> Iterator[Metric]:
    capped = len(io) > limit
    yield gauge(
        "nodeos_volume_labels_capped",
        "1 when this node has more volumes than metrics_volume_labels_max: volume series are summed",
        1 if capped else 0,
    )
    rows: dict[str, dict[str, float]] = {}
    for vol, stats in io.items():
        key = AGGREGATED if capped else str(vol)
        row = rows.setdefault(key, {})
        for f, _, _ in _IO_FIELDS:
            row[f] = row.get(f, 0.0) + (_num(stats.get(f)) or 0.0)
        row["in_flight"] = row.get("in_flight", 0.0) + (_num(stats.get("in_flight")) or 0.0)
    for f, name, doc in _IO_FIELDS:
        fam = counter(name, doc, ["volume"])
        for vol in sorted(rows):
            fam.add_metric([vol], rows[vol][f])
        yield fam
    inflight = gauge("nodeos_volume_io_in_flight", "I/O requests in flight", labels=["volume"])
    for vol in sorted(rows):
        inflight.add_metric([vol], rows[vol]["in_flight"])
    yield inflight


def _net(net: dict[str, Any] | None) -> Iterator[Metric]:
    if not net:
        return
    pause = counter(
        "nodeos_net_pause_frames", "PFC pause frames per priority", ["interface", "priority", "direction"]
    )
    discards = counter(
        "nodeos_net_discards", "Packets dropped by the NIC, by counter", ["interface", "counter"]
    )
    for dev, stats in sorted((net.get("nic") or {}).items()):
        for name, value in sorted(stats.items()):
            if m := _PRIO_PAUSE.match(name):
                pause.add_metric([dev, m.group(2), m.group(1)], float(value))
            elif _PRIO_DISCARD.match(name) or name in _NIC_DISCARDS:
                discards.add_metric([dev, name], float(value))
    yield pause
    yield discards
    fams = {k: counter(name, doc, ["port"]) for k, (name, doc) in _RDMA.items()}
    for port, stats in sorted((net.get("rdma") or {}).items()):
        for k, fam in fams.items():
            if k in stats:
                fam.add_metric([port], float(stats[k]))
    yield from fams.values()
    if net.get("drift_items") is not None:
        yield gauge(
            "nodeos_net_drift_items", "Network settings that differ from the plan", net["drift_items"]
        )
