"""Config validation: bad input names its field and the allowed values; good input resolves."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeos.errors import BadInput
from nodeos.net import dcb
from nodeos.net.model import parse_config
from nodeos.net.profiles import MTU_MAX, MTU_MIN


def doc(qos: dict[str, Any] | None = None, **iface: Any) -> dict[str, Any]:
    base = {"name": "ens1f0", "mtu": 9000, "addresses": ["192.0.2.11/24"]}
    base.update(iface)
    return {"interfaces": [base], "qos": qos if qos is not None else {"profile": "roce-lossless"}}


def bad(d: dict[str, Any]) -> BadInput:
    with pytest.raises(BadInput) as exc:
        parse_config(d)
    return exc.value


def test_issue_example_resolves_to_the_roce_lossless_profile() -> None:
    cfg = parse_config(doc({"profile": "roce-lossless", "roce_priority": 3, "roce_dscp": 26, "cnp_dscp": 48}))
    q = cfg.qos
    assert cfg.interfaces[0].addresses == ("192.0.2.11/24",)
    assert q.dcb is not None
    assert q.dcb.pfc_enabled == (3,)
    assert q.dcb.dscp_prio == ((26, 3), (48, 6))
    assert q.dcb.prio_tc[3] == 3 and q.dcb.prio_tc[6] == 6
    assert q.dcb.tc_tsa[6] == "strict" and q.dcb.tc_tsa[3] == "ets"
    assert q.dcb.tc_bw[0] + q.dcb.tc_bw[3] == 100
    assert q.roce_tos == 106  # DSCP 26 with ECT(0)
    assert q.mtu == 9000


def test_overrides_move_every_derived_value() -> None:
    cfg = parse_config(
        doc(
            {
                "profile": "roce-lossless",
                "roce_priority": 4,
                "roce_dscp": 34,
                "roce_share": 70,
                "default_share": 30,
            }
        )
    )
    d = cfg.qos.dcb
    assert d is not None
    assert d.pfc_enabled == (4,) and d.prio_tc[4] == 4 and d.tc_bw[4] == 70 and d.tc_bw[0] == 30
    assert cfg.qos.roce_tos == 34 << 2 | 2


def test_tcp_dctcp_profile_sets_ecn_and_dctcp() -> None:
    cfg = parse_config(doc({"profile": "tcp-dctcp"}))
    assert cfg.qos.sysctls == {"net.ipv4.tcp_ecn": "1", "net.ipv4.tcp_congestion_control": "dctcp"}
    assert cfg.qos.dcb is None and cfg.qos.route_ecn


@pytest.mark.parametrize(
    ("d", "field"),
    [
        (doc({"profile": "roce-lossless", "roce_priority": 8}), "qos.roce_priority"),
        (doc({"profile": "roce-lossless", "cnp_priority": -1}), "qos.cnp_priority"),
        (doc({"profile": "roce-lossless", "roce_dscp": 64}), "qos.roce_dscp"),
        (doc({"profile": "roce-lossless", "cnp_dscp": -3}), "qos.cnp_dscp"),
        (doc({"profile": "roce-lossless", "roce_share": 60}), "qos.roce_share"),
        (doc({"profile": "roce-lossless", "pfc_priorities": [3, 9]}), "qos.pfc_priorities"),
        (doc({"profile": "tcp-dctcp", "storage_dscp": 99}), "qos.storage_dscp"),
        (doc({"profile": "gold"}), "qos.profile"),
        (doc({"profile": "roce-lossless", "colour": 1}), "qos.colour"),
        (doc(mtu=9500), "interfaces[0].mtu"),
        (doc(mtu=10), "interfaces[0].mtu"),
        (doc(addresses=["192.0.2.300/24"]), "interfaces[0].addresses[0]"),
        (doc(addresses=["192.0.2.3"]), "interfaces[0].addresses[0]"),
        (doc(name="this-name-is-far-too-long"), "interfaces[0].name"),
        (doc(routes=[{"dst": "nowhere"}]), "interfaces[0].routes[0].dst"),
        ({"interfaces": [], "qos": {}, "management": {"probe": "x"}}, "management.probe"),
        ({"interface": []}, "interface"),
    ],
)
def test_bad_input_names_the_field(d: dict[str, Any], field: str) -> None:
    err = bad(d)
    assert err.field == field
    assert err.exit_code == 2


def test_shares_error_says_what_they_sum_to() -> None:
    err = bad(doc({"profile": "roce-lossless", "roce_share": 60, "default_share": 50}))
    assert "sum to 100" in err.message and "110" in err.message


def test_duplicate_interface_is_rejected() -> None:
    d = doc()
    d["interfaces"].append(dict(d["interfaces"][0]))
    assert bad(d).field == "interfaces[1].name"


ints = st.integers(min_value=-1000, max_value=100_000)


@given(p=ints)
def test_priority_valid_exactly_in_0_to_7(p: int) -> None:
    d = doc({"profile": "roce-lossless", "roce_priority": p, "cnp_priority": 6 if p != 6 else 5})
    if 1 <= p <= 7:
        assert parse_config(d).qos.dcb.pfc_enabled == (p,)  # type: ignore[union-attr]
    else:
        assert bad(d).field == "qos.roce_priority"


@given(v=ints)
def test_dscp_valid_exactly_in_0_to_63(v: int) -> None:
    d = doc({"profile": "roce-lossless", "roce_dscp": v, "cnp_dscp": 48 if v != 48 else 46})
    if 0 <= v <= 63:
        assert (v, 3) in parse_config(d).qos.dcb.dscp_prio  # type: ignore[union-attr]
    else:
        assert bad(d).field == "qos.roce_dscp"


@given(a=st.integers(0, 100), b=st.integers(0, 100))
def test_ets_shares_must_sum_to_100(a: int, b: int) -> None:
    d = doc({"profile": "roce-lossless", "roce_share": a, "default_share": b})
    if a + b == 100:
        bw = parse_config(d).qos.dcb.tc_bw  # type: ignore[union-attr]
        assert sum(bw) == 100
    else:
        assert bad(d).field == "qos.roce_share"


@given(m=ints)
def test_mtu_range(m: int) -> None:
    d = doc(mtu=m)
    if MTU_MIN <= m <= MTU_MAX:
        assert parse_config(d).interfaces[0].mtu == m
    else:
        err = bad(d)
        assert err.field == "interfaces[0].mtu" and err.allowed == f"{MTU_MIN}-{MTU_MAX}"


def test_dcbx_mode_bits_match_dcb_tool() -> None:
    # `dcb dcbx set dev X host ieee` sends 0x09 (captured); our host-ieee mode must be the same.
    assert dcb.DCBX_MODE_BITS["host-ieee"] == 0x09


def test_watch_thresholds_are_parameters() -> None:
    d = doc()
    d["watch"] = {"pause_frames_per_s": 50, "paused_fraction": 0.5}
    th = parse_config(d).watch
    assert th.pause_frames_per_s == 50 and th.paused_fraction == 0.5 and th.loss_events == 1
    d["watch"] = {"paused_fraction": 2}
    assert bad(d).field == "watch.paused_fraction"
