"""Counter samples -> alarms (pure). Counter names are those mlx5 and rdma hw_counters expose."""

from __future__ import annotations

from nodeos.net.watch import Sample, Thresholds, evaluate, parse_ethtool_stats

TH = Thresholds()


def kinds(prev: Sample, cur: Sample, lossless: tuple[int, ...] = (3,)) -> list[tuple[str, str]]:
    return [(a.severity, a.kind) for a in evaluate(prev, cur, lossless, TH)]


def test_quiet_counters_raise_nothing() -> None:
    s = {"ens1f0": {"rx_prio3_pause": 10, "rx_prio3_discards": 0, "tx_pause_storm_error_events": 0}}
    assert kinds(Sample(0, nic=s), Sample(10, nic=s)) == []


def test_pause_storm_counter_is_critical() -> None:
    a = Sample(0, nic={"ens1f0": {"tx_pause_storm_warning_events": 0}})
    b = Sample(10, nic={"ens1f0": {"tx_pause_storm_warning_events": 2}})
    assert kinds(a, b) == [("critical", "pause_storm")]


def test_pause_duration_share_of_interval() -> None:
    a = Sample(0, nic={"ens1f0": {"rx_prio3_pause_duration": 0}})
    half = Sample(10, nic={"ens1f0": {"rx_prio3_pause_duration": 5_000_000}})  # 5 s of 10 s, in us
    little = Sample(10, nic={"ens1f0": {"rx_prio3_pause_duration": 1_000}})
    assert kinds(a, half) == [("critical", "pause_storm")]
    assert kinds(a, little) == []


def test_drop_on_the_lossless_priority_is_silent_loss_but_not_on_others() -> None:
    a = Sample(0, nic={"ens1f0": {"rx_prio3_discards": 5, "rx_prio0_discards": 5}})
    b = Sample(1, nic={"ens1f0": {"rx_prio3_discards": 6, "rx_prio0_discards": 90}})
    assert kinds(a, b) == [("critical", "silent_loss")]


def test_counter_reset_is_not_an_event() -> None:
    a = Sample(0, nic={"ens1f0": {"rx_out_of_buffer": 500}})
    b = Sample(1, nic={"ens1f0": {"rx_out_of_buffer": 0}})
    assert kinds(a, b) == []


def test_rdma_retransmits_and_ecn_without_cnp() -> None:
    a = Sample(
        0,
        rdma={
            "mlx5_0/1": {
                "out_of_sequence": 0,
                "np_ecn_marked_roce_packets": 0,
                "np_cnp_sent": 0,
                "rp_cnp_handled": 0,
            }
        },
    )
    b = Sample(
        1,
        rdma={
            "mlx5_0/1": {
                "out_of_sequence": 3,
                "np_ecn_marked_roce_packets": 100,
                "np_cnp_sent": 0,
                "rp_cnp_handled": 4,
            }
        },
    )
    assert kinds(a, b) == [
        ("critical", "silent_loss"),
        ("warning", "ecn_without_cnp"),
        ("info", "congestion"),
    ]


def test_parse_ethtool_stats() -> None:
    text = (
        "NIC statistics:\n     rx_prio3_pause: 12\n"
        "     tx_pause_storm_error_events: 0\n     peer_ifindex: 5\n"
    )
    assert parse_ethtool_stats(text) == {
        "rx_prio3_pause": 12,
        "tx_pause_storm_error_events": 0,
        "peer_ifindex": 5,
    }


def test_pfc_counters_from_dcb_netlink_feed_the_pause_alarm() -> None:
    from nodeos.net.dcb import DcbState, Pfc
    from nodeos.net.watch import add_pfc_counters

    def state(n: int) -> DcbState:
        return DcbState("ens1f0", pfc=Pfc(pfc_en=8, requests=(0, 0, 0, n, 0, 0, 0, 0)))

    a: dict[str, int] = {}
    b: dict[str, int] = {"tx_prio0_pause": 7}  # ethtool's own value wins
    add_pfc_counters(a, state(0))
    add_pfc_counters(b, state(50_000))
    assert b["tx_prio0_pause"] == 7 and b["tx_prio3_pause"] == 50_000
    assert kinds(Sample(0, nic={"ens1f0": a}), Sample(10, nic={"ens1f0": b})) == [("warning", "heavy_pause")]
