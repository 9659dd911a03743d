"""What an operator reads off /metrics for a given state of the node and the cluster."""

from __future__ import annotations

import copy

import pytest

from nodeos.observe import metrics

from .snapshots import full, sample_names, scrape, value


def test_cluster_series_say_who_leads_and_how_far_behind_members_are() -> None:
    fams = scrape(full())
    assert value(fams, "nodeos_cluster_is_leader") == 1
    assert value(fams, "nodeos_cluster_term") == 4
    assert value(fams, "nodeos_cluster_apply_lag_entries") == 2
    assert value(fams, "nodeos_cluster_member_up", member="3") == 0
    assert value(fams, "nodeos_cluster_member_lag_entries", member="2") == 11
    assert value(fams, "nodeos_cluster_members", state="down") == 1
    assert value(fams, "nodeos_cluster_leader_changes_total") == 2


def test_volume_health_comes_from_the_map_desired_against_reported() -> None:
    fams = scrape(full())
    assert value(fams, "nodeos_cluster_volumes_degraded") == 1  # u2: one of two replicas in sync
    assert value(fams, "nodeos_volume_degraded", volume="u1") == 0
    assert value(fams, "nodeos_volume_degraded", volume="u2") == 1
    assert value(fams, "nodeos_volume_replicas_in_sync", volume="u2") == 1
    assert value(fams, "nodeos_volume_rebuild_progress_ratio", volume="u2", node="3") == 0.25
    assert value(fams, "nodeos_volume_epoch", volume="u1") == 3
    assert value(fams, "nodeos_volume_info", volume="u1", name="v1", state="ready") == 1


def test_followers_leave_cluster_wide_series_to_the_leader() -> None:
    snap = full()
    snap["cluster"].update(leader=2, role="follower")
    names = sample_names(snap)
    assert "nodeos_cluster_member_up" not in names
    assert "nodeos_cluster_volumes_degraded" not in names
    assert "nodeos_drive_percent_used" in names  # its own drives: every node exports them
    assert value(scrape(snap), "nodeos_cluster_is_leader") == 0


def test_drives_and_pools_of_this_node_from_its_report() -> None:
    fams = scrape(full())
    assert value(fams, "nodeos_drive_percent_used", drive="S123") == 7
    assert value(fams, "nodeos_drive_temperature_celsius", drive="S123") == 41
    assert value(fams, "nodeos_pool_used_bytes", pool="p1") == 750  # size - free
    assert value(fams, "nodeos_pool_overcommit_ratio", pool="p1") == 3.0


def test_volume_io_counters_and_the_label_cap() -> None:
    snap = full()
    fams = scrape(snap)
    assert value(fams, "nodeos_volume_written_bytes_total", volume="u1") == 8192
    assert value(fams, "nodeos_volume_write_time_seconds_total", volume="u1") == 1.5
    assert value(fams, "nodeos_volume_labels_capped") == 0
    snap["volume_io"] = {f"v{i}": {"writes": 1, "write_bytes": 10} for i in range(5)}
    snap["limits"] = {"volume_labels_max": 3}
    fams = scrape(snap)
    assert value(fams, "nodeos_volume_labels_capped") == 1
    # Past the cap every volume is summed into one series: totals stay right, cardinality bounded.
    assert value(fams, "nodeos_volume_writes_total", volume=metrics.AGGREGATED) == 5
    assert value(fams, "nodeos_volume_written_bytes_total", volume=metrics.AGGREGATED) == 50
    with pytest.raises(KeyError):
        value(fams, "nodeos_volume_writes_total", volume="v0")


def test_network_counters_from_ethtool_and_rdma() -> None:
    fams = scrape(full())
    assert value(fams, "nodeos_net_pause_frames_total", interface="eth1", priority="3", direction="rx") == 120
    assert value(fams, "nodeos_net_pause_frames_total", interface="eth1", priority="3", direction="tx") == 7
    assert value(fams, "nodeos_net_discards_total", interface="eth1", counter="rx_prio3_discards") == 2
    assert value(fams, "nodeos_net_discards_total", interface="eth1", counter="rx_discards_phy") == 5
    assert value(fams, "nodeos_net_cnp_handled_total", port="mlx5_0/1") == 9


def test_daemon_series_and_api_errors_by_code() -> None:
    fams = scrape(full())
    assert value(fams, "nodeos_build_info", version="0.1.0") == 1
    assert value(fams, "nodeos_dataplane_info", dataplane="kernel") == 1
    assert value(fams, "nodeos_api_errors_total", code="bad_input") == 2
    assert value(fams, "nodeos_api_connections_closed_total", reason="permission") == 1


def test_sections_that_do_not_exist_yet_give_no_series_and_no_error() -> None:
    snap = full()
    snap["cluster"]["map"] = {"nodes": {}}  # a map from before issue 8: no volumes/reports
    names = sample_names(snap)
    assert "nodeos_cluster_volumes_degraded" in names  # zero, from an empty volumes section
    assert "nodeos_drive_size_bytes" not in names
    assert sample_names({}) >= {"nodeos_build_info", "nodeos_cluster_member"}
    odd = copy.deepcopy(full())
    odd["cluster"]["map"]["volumes"]["u3"] = "not a map"
    odd["cluster"]["map"]["replica_states"]["u1"] = None
    assert value(scrape(odd), "nodeos_volume_replicas_in_sync", volume="u1") == 0


def test_raft_fsync_and_commit_latency_histograms() -> None:
    fams = scrape(full())
    assert value(fams, "nodeos_cluster_fsync_seconds_bucket", le="0.0005") == 2
    assert value(fams, "nodeos_cluster_fsync_seconds_bucket", le="0.025") == 3
    assert value(fams, "nodeos_cluster_fsync_seconds_bucket", le="+Inf") == 3
    assert value(fams, "nodeos_cluster_fsync_seconds_count") == 3
    assert value(fams, "nodeos_cluster_fsync_seconds_sum") == pytest.approx(0.0208)
    assert value(fams, "nodeos_cluster_commit_seconds_count") == 1


def test_histogram_buckets_are_upper_bounds_inclusive() -> None:
    from nodeos.observe.latency import LatencyHistogram

    h = LatencyHistogram(buckets=(0.001, 0.01))
    for x in (0.001, 0.0011, 5.0):
        h.observe(x)
    assert h.snapshot()["buckets"] == [(0.001, 1), (0.01, 2), (float("inf"), 3)]
