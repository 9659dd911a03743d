"""Metric families from the replicated cluster map: volumes, replicas, rebuilds, drives, pools.

Pure, and defensive about the map's shape: a section that does not exist yet yields no
series rather than an error. Shapes read (desired state written by the leader, actual
state reported by the nodes' agents):

  volumes:        {uuid: {name, size_bytes, replicas, placement: [{node, pool_id}], primary, epoch, state}}
  replica_states: {uuid: {node_id: {state, progress | rebuild_progress (0..1) |
                                    rebuilt_bytes + size_bytes}}}
  reports:        {node_id: {drives: [{id|serial, size_bytes, health, smart: {critical_warning,
                              percent_used, media_errors, temperature_c}}],
                             pools: [{id|pool_id, size_bytes, used_bytes|free_bytes, provisioned_bytes}]}}

Who exports what: volume and replica series come from the leader only (every node holds the
same map; one exporter keeps series unique and the leader's map is the freshest); drive and
pool series come from each node, for its own report (label cardinality bounded by hardware).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

IN_SYNC = ("in_sync", "insync", "ok", "healthy", "synced", "online")
REBUILDING = ("rebuilding", "resyncing", "syncing", "catching_up")


def _f(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    return float(v) if isinstance(v, (int, float)) else None


def _dict(v: Any) -> dict[Any, Any]:
    return v if isinstance(v, dict) else {}


def _by_node(section: dict[Any, Any], node_id: Any) -> Any:
    # msgpack maps keep int keys; JSON-ish producers may have made them strings.
    return section.get(node_id, section.get(str(node_id)))


def families(cluster: dict[str, Any], limit: int) -> Iterator[Metric]:
    state = _dict(cluster.get("map"))
    if not state:
        return
    me = cluster.get("node_id")
    yield from _own_report(_dict(_by_node(_dict(state.get("reports")), me)))
    if cluster.get("leader") is not None and cluster.get("leader") == me:
        yield from _volumes(_dict(state.get("volumes")), _dict(state.get("replica_states")), limit)


def replica_summary(vol: dict[str, Any], replicas: dict[Any, Any]) -> tuple[int, int, bool]:
    """(desired replicas, replicas in sync, degraded?) of one volume."""
    desired = vol.get("replicas")
    if not isinstance(desired, int) or isinstance(desired, bool):
        desired = len(vol.get("placement") or []) or 1
    in_sync = sum(1 for r in replicas.values() if str(_dict(r).get("state", "")).lower() in IN_SYNC)
    degraded = str(vol.get("state", "")).lower() == "degraded" or (bool(replicas) and in_sync < desired)
    return desired, in_sync, degraded


def rebuild_ratio(rep: dict[str, Any]) -> float | None:
    """How far a rebuilding replica is (0..1), when its report says."""
    for k in ("progress", "rebuild_progress"):
        v = _f(rep.get(k))
        if v is not None:
            return max(0.0, min(1.0, v))
    done, size = _f(rep.get("rebuilt_bytes")), _f(rep.get("size_bytes"))
    if done is not None and size:
        return max(0.0, min(1.0, done / size))
    return None


def _volumes(volumes: dict[Any, Any], rstates: dict[Any, Any], limit: int) -> Iterator[Metric]:
    by_state = GaugeMetricFamily(
        "nodeos_cluster_volumes", "Volumes in the cluster map by state", labels=["state"]
    )
    degraded_n = 0
    counts: dict[str, int] = {}
    per_volume = len(volumes) <= limit
    info = GaugeMetricFamily(
        "nodeos_volume_info", "Always 1; the volume's name and state", labels=["volume", "name", "state"]
    )
    size = GaugeMetricFamily("nodeos_volume_size_bytes", "Provisioned size of the volume", labels=["volume"])
    want = GaugeMetricFamily("nodeos_volume_replicas", "Replicas the volume should have", labels=["volume"])
    sync = GaugeMetricFamily("nodeos_volume_replicas_in_sync", "Replicas reported in sync", labels=["volume"])
    degr = GaugeMetricFamily(
        "nodeos_volume_degraded", "1 when fewer replicas are in sync than wanted", labels=["volume"]
    )
    epoch = GaugeMetricFamily(
        "nodeos_volume_epoch", "Ownership epoch (bumped at each failover)", labels=["volume"]
    )
    rebuild = GaugeMetricFamily(
        "nodeos_volume_rebuild_progress_ratio",
        "How far a rebuilding replica is (0..1)",
        labels=["volume", "node"],
    )
    rebuilding_n = 0
    for uuid, vol in sorted(volumes.items(), key=lambda kv: str(kv[0])):
        vol = _dict(vol)
        reps = _dict(rstates.get(uuid))
        desired, in_sync, degraded = replica_summary(vol, reps)
        st = str(vol.get("state") or "unknown")
        counts[st] = counts.get(st, 0) + 1
        degraded_n += degraded
        for node, rep in sorted(reps.items(), key=lambda kv: str(kv[0])):
            rep = _dict(rep)
            if str(rep.get("state", "")).lower() not in REBUILDING:
                continue
            rebuilding_n += 1
            ratio = rebuild_ratio(rep)
            if per_volume and ratio is not None:
                rebuild.add_metric([str(uuid), str(node)], ratio)
        if not per_volume:
            continue
        v = str(uuid)
        info.add_metric([v, str(vol.get("name") or ""), st], 1)
        size.add_metric([v], _f(vol.get("size_bytes")) or 0.0)
        want.add_metric([v], desired)
        sync.add_metric([v], in_sync)
        degr.add_metric([v], 1 if degraded else 0)
        epoch.add_metric([v], _f(vol.get("epoch")) or 0.0)
    for st, n in sorted(counts.items()):
        by_state.add_metric([st], n)
    yield by_state
    yield GaugeMetricFamily(
        "nodeos_cluster_volumes_degraded", "Volumes with fewer in-sync replicas than wanted", value=degraded_n
    )
    yield GaugeMetricFamily(
        "nodeos_cluster_replicas_rebuilding", "Replicas being rebuilt", value=rebuilding_n
    )
    yield from (info, size, want, sync, degr, epoch, rebuild)


def _own_report(report: dict[str, Any]) -> Iterator[Metric]:
    drives = [d for d in report.get("drives") or [] if isinstance(d, dict)]
    pools = [p for p in report.get("pools") or [] if isinstance(p, dict)]
    if drives:
        yield from _drives(drives)
    if pools:
        yield from _pools(pools)


def _drives(drives: list[dict[str, Any]]) -> Iterator[Metric]:
    warn = GaugeMetricFamily(
        "nodeos_drive_critical_warning", "SMART critical warning bits (0: none)", labels=["drive"]
    )
    used = GaugeMetricFamily(
        "nodeos_drive_percent_used",
        "SMART percentage used: vendor estimate of life used (may exceed 100)",
        labels=["drive"],
    )
    media = CounterMetricFamily(
        "nodeos_drive_media_errors", "SMART media and data integrity errors", labels=["drive"]
    )
    temp = GaugeMetricFamily("nodeos_drive_temperature_celsius", "Composite temperature", labels=["drive"])
    size = GaugeMetricFamily("nodeos_drive_size_bytes", "Drive capacity", labels=["drive"])
    failing = GaugeMetricFamily(
        "nodeos_drive_failing", "1 when nodeos judges the drive failing", labels=["drive"]
    )
    for d in drives:
        name = str(d.get("id") or d.get("serial") or d.get("device") or "unknown")
        smart = _dict(d.get("smart"))
        size.add_metric([name], _f(d.get("size_bytes")) or 0.0)
        failing.add_metric([name], 1 if str(d.get("health", "")) == "failing" else 0)
        for fam, key in ((warn, "critical_warning"), (used, "percent_used"), (temp, "temperature_c")):
            v = _f(smart.get(key))
            if v is not None:
                fam.add_metric([name], v)
        v = _f(smart.get("media_errors"))
        if v is not None:
            media.add_metric([name], v)
    yield from (warn, used, media, temp, size, failing)


def _pools(pools: list[dict[str, Any]]) -> Iterator[Metric]:
    size = GaugeMetricFamily("nodeos_pool_size_bytes", "Pool capacity", labels=["pool"])
    used = GaugeMetricFamily("nodeos_pool_used_bytes", "Pool space in use", labels=["pool"])
    prov = GaugeMetricFamily(
        "nodeos_pool_provisioned_bytes", "Sum of the thin volumes' sizes", labels=["pool"]
    )
    over = GaugeMetricFamily(
        "nodeos_pool_overcommit_ratio",
        "Provisioned over capacity (above 1: thin overcommit)",
        labels=["pool"],
    )
    for p in pools:
        name = str(p.get("id") or p.get("pool_id") or p.get("name") or "unknown")
        total = _f(p.get("size_bytes")) or 0.0
        u = _f(p.get("used_bytes"))
        if u is None and _f(p.get("free_bytes")) is not None:
            u = total - (_f(p.get("free_bytes")) or 0.0)
        size.add_metric([name], total)
        if u is not None:
            used.add_metric([name], u)
        pv = _f(p.get("provisioned_bytes"))
        if pv is not None:
            prov.add_metric([name], pv)
            if total:
                over.add_metric([name], pv / total)
    yield from (size, used, prov, over)
