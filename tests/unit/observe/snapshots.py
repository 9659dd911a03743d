"""A snapshot with every section filled, shaped as the service gathers it (for the pure tests)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nodeos.net.watch import parse_ethtool_stats
from nodeos.observe import metrics
from nodeos.observe.latency import LatencyHistogram


def hist(*seconds: float) -> dict[str, Any]:
    h = LatencyHistogram()
    for x in seconds:
        h.observe(x)
    return h.snapshot()


ETHTOOL = """NIC statistics:
     rx_packets: 1000
     rx_prio3_pause: 120
     tx_prio3_pause: 7
     rx_prio0_pause: 0
     rx_prio3_discards: 2
     rx_discards_phy: 5
     tx_bytes: 99
"""


def full() -> dict[str, Any]:
    vols = {
        "u1": {
            "name": "v1",
            "size_bytes": 10 << 30,
            "replicas": 2,
            "primary": 1,
            "epoch": 3,
            "state": "ready",
            "placement": [{"node": 1, "pool_id": "p1"}, {"node": 2, "pool_id": "p2"}],
        },
        "u2": {
            "name": "v2",
            "size_bytes": 1 << 30,
            "replicas": 2,
            "primary": 2,
            "epoch": 1,
            "state": "ready",
        },
    }
    return {
        "daemon": {
            "version": "0.1.0",
            "start_time": 1000.0,
            "dataplane": {"name": "kernel", "up": True, "stuck": ["stop_mirror"], "stuck_total": 1},
            "api_requests": 10,
            "api_errors": {"bad_input": 2, "not_found": 1},
            "api_refused": {"permission": 1, "idle": 0, "busy": 0},
        },
        "cluster": {
            "member": True,
            "node_id": 1,
            "leader": 1,
            "role": "leader",
            "term": 4,
            "commit": 100,
            "applied": 98,
            "last_index": 101,
            "leader_changes": 2,
            "timings": {"fsync": hist(0.0004, 0.0004, 0.02), "commit": hist(0.003)},
            "voters": [1, 2, 3],
            "learners": [],
            "progress": {
                1: {"match": 101, "lag": 0, "active": True},
                2: {"match": 90, "lag": 11, "active": True},
                3: {"match": 50, "lag": 51, "active": False},
            },
            "map": {
                "volumes": vols,
                "replica_states": {
                    "u1": {1: {"state": "in_sync"}, 2: {"state": "in_sync"}},
                    "u2": {
                        2: {"state": "in_sync"},
                        3: {"state": "rebuilding", "rebuilt_bytes": 1 << 28, "size_bytes": 1 << 30},
                    },
                },
                "reports": {
                    1: {
                        "drives": [
                            {
                                "id": "S123",
                                "size_bytes": 4 << 40,
                                "health": "ok",
                                "smart": {
                                    "critical_warning": 0,
                                    "percent_used": 7,
                                    "media_errors": 0,
                                    "temperature_c": 41,
                                },
                            }
                        ],
                        "pools": [
                            {"id": "p1", "size_bytes": 1000, "free_bytes": 250, "provisioned_bytes": 3000}
                        ],
                    }
                },
            },
        },
        "volume_io": {
            "u1": {
                "reads": 10,
                "writes": 20,
                "read_bytes": 4096,
                "write_bytes": 8192,
                "read_seconds": 0.5,
                "write_seconds": 1.5,
                "in_flight": 1,
            },
        },
        "net": {
            "nic": {"eth1": parse_ethtool_stats(ETHTOOL)},
            "rdma": {"mlx5_0/1": {"np_ecn_marked_roce_packets": 3, "np_cnp_sent": 3, "rp_cnp_handled": 9}},
            "drift_items": 0,
        },
        "limits": {"volume_labels_max": 1000},
    }


class SnapshotCollector:
    def __init__(self, snap: dict[str, Any]) -> None:
        self.snap = snap

    def collect(self) -> Any:
        yield from metrics.families(self.snap)


def scrape(snap: dict[str, Any]) -> dict[str, list[Any]]:
    """Exposition text of a snapshot parsed back: {family name: [samples]}."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(snap))
    ProcessCollector(namespace="nodeosd", registry=reg)
    text = generate_latest(reg).decode()
    return {f.name: list(f.samples) for f in text_string_to_metric_families(text)}


def sample_names(snap: dict[str, Any]) -> set[str]:
    return {s.name for samples in scrape(snap).values() for s in samples}


def value(fams: dict[str, list[Any]], metric: str, /, **labels: str) -> float:
    for samples in fams.values():
        for s in samples:
            if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise KeyError(f"{metric}{labels} not exported")
