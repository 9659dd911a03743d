"""The pure planner: desired + observed -> ordered, reversible changes; empty when in sync."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nodeos.errors import BadInput
from nodeos.net import dcb, marking
from nodeos.net.model import NODEOS_RTPROTO, NetConfig, parse_config
from nodeos.net.observe import LinkState, Observed, RouteState
from nodeos.net.plan import ORDER, make_plan
from nodeos.net.verify import verify


def link(name: str, **kw: Any) -> LinkState:
    base = dict(
        name=name,
        index=2,
        mtu=1500,
        min_mtu=68,
        max_mtu=9600,
        up=False,
        operstate="DOWN",
        qdisc="noqueue",
        num_tx_queues=4,
        addresses=(),
    )
    base.update(kw)
    return LinkState(**base)  # type: ignore[arg-type]


def observed(**links: LinkState) -> Observed:
    return Observed(
        links=links or {"ens1f0": link("ens1f0")},
        routes=[],
        sysctls={"net.ipv4.tcp_ecn": "2", "net.ipv4.tcp_congestion_control": "cubic"},
        available_cc=("reno", "cubic", "dctcp"),
    )


def cfg(qos: dict[str, Any] | None = None, mgmt: dict[str, Any] | None = None, **iface: Any) -> NetConfig:
    i = {
        "name": "ens1f0",
        "mtu": 9000,
        "addresses": ["192.0.2.11/24"],
        "routes": [{"dst": "198.51.100.0/24", "gateway": "192.0.2.1"}],
    }
    i.update(iface)
    d: dict[str, Any] = {"interfaces": [i], "qos": qos or {"profile": "none"}}
    if mgmt:
        d["management"] = mgmt
    return parse_config(d)


def in_sync_obs(c: Any) -> Observed:
    """An observed state that holds exactly what `c` asks for (profile none / tcp-dctcp)."""
    o = observed(
        ens1f0=link(
            "ens1f0",
            mtu=9000,
            up=True,
            operstate="UP",
            addresses=("192.0.2.11/24",),
            qdisc=c.qos.qdisc or "noqueue",
        )
    )
    o.routes = [
        RouteState(
            "198.51.100.0/24",
            "192.0.2.1",
            "ens1f0",
            None,
            NODEOS_RTPROTO,
            c.qos.route_congestion_control,
            c.qos.route_ecn,
        )
    ]
    o.sysctls.update(c.qos.sysctls)
    if c.qos.storage_dscp is not None:
        o.dscp_mark = marking.spec_comment(c.qos.storage_dscp, c.qos.storage_ports)
    return o


def test_changes_come_in_a_safe_order() -> None:
    c = cfg()
    p = make_plan(c, observed())
    kinds = [ch.kind for ch in p.changes]
    assert kinds == ["mtu", "link", "address_add", "route"]
    assert kinds == sorted(kinds, key=ORDER.index)


@pytest.mark.parametrize("profile", ["none", "tcp-dctcp"])
def test_empty_plan_when_the_system_matches(profile: str) -> None:
    c = cfg({"profile": profile})
    p = make_plan(c, in_sync_obs(c))
    assert p.changes == [] and p.blockers == []
    assert verify(c, in_sync_obs(c))[0] == []


def test_each_change_reverses_to_its_before_value() -> None:
    c = cfg({"profile": "tcp-dctcp"})
    o = observed(ens1f0=link("ens1f0", addresses=("10.0.0.5/24",)))
    for ch in make_plan(c, o).changes:
        r = ch.reverse()
        assert (r.before, r.after) == (ch.after, ch.before)
        assert r.reverse().kind == ch.kind
    kinds = {ch.kind for ch in make_plan(c, o).changes}
    # new address is added before the old one goes
    assert {"address_add", "address_del"} <= kinds
    ks = [ch.kind for ch in make_plan(c, o).changes]
    assert ks.index("address_add") < ks.index("address_del")


def test_unknown_interface_is_bad_input_listing_existing_ones() -> None:
    with pytest.raises(BadInput) as exc:
        make_plan(cfg(name="ens9"), observed())
    assert exc.value.field == "interfaces[0].name" and exc.value.allowed == ["ens1f0"]


def test_mtu_beyond_the_device_maximum_is_bad_input() -> None:
    with pytest.raises(BadInput) as exc:
        make_plan(cfg(mtu=9216), observed(ens1f0=link("ens1f0", max_mtu=9000)))
    assert exc.value.field == "interfaces[0].mtu" and exc.value.allowed == "68-9000"


def test_unavailable_congestion_control_blocks_with_the_available_list() -> None:
    c = cfg({"profile": "tcp-dctcp"})
    o = in_sync_obs(c)
    o.available_cc = ("reno", "cubic")
    p = make_plan(c, o)
    assert len(p.blockers) == 1
    assert "dctcp" in p.blockers[0]["message"] and "reno cubic" in p.blockers[0]["message"]


def test_only_nodeos_routes_are_removed() -> None:
    c = cfg(routes=[])
    o = observed(ens1f0=link("ens1f0", mtu=9000, up=True, addresses=("192.0.2.11/24",)))
    o.routes = [
        RouteState("203.0.113.0/24", "192.0.2.1", "ens1f0", None, NODEOS_RTPROTO, None, False),
        RouteState("192.0.2.0/24", None, "ens1f0", None, 2, None, False),
    ]
    p = make_plan(c, o)
    assert [(ch.kind, ch.before["dst"], ch.after) for ch in p.changes] == [("route", "203.0.113.0/24", None)]


def test_management_interface_changes_are_flagged_risky() -> None:
    c = cfg(mgmt={"interface": "ens1f0"})
    assert all(ch.risky for ch in make_plan(c, observed()).changes)
    c2 = cfg(mgmt={"interface": "eno1"})
    o = observed(ens1f0=link("ens1f0"), eno1=link("eno1", index=3))
    assert not any(ch.risky for ch in make_plan(c2, o).changes)


def roce_obs(state: dcb.DcbState) -> Observed:
    o = observed(ens1f0=link("ens1f0", mtu=9000, up=True, addresses=("192.0.2.11/24",)))
    o.routes = [RouteState("198.51.100.0/24", "192.0.2.1", "ens1f0", None, NODEOS_RTPROTO, None, False)]
    o.dcb = {"ens1f0": state}
    return o


def test_roce_profile_programs_dcb_from_a_blank_nic() -> None:
    c = cfg({"profile": "roce-lossless"})
    blank = dcb.DcbState("ens1f0", ets=dcb.Ets(), pfc=dcb.Pfc(pfc_cap=8), apps=(), dcbx=0x02)
    p = make_plan(c, roce_obs(blank))
    by = {ch.kind: ch for ch in p.changes}
    assert by["dcbx"].after == 0x09
    assert by["ets"].after["prio_tc"] == (0, 0, 0, 3, 0, 0, 6, 0)
    assert by["ets"].after["tc_tsa"][6] == dcb.TSA_BY_NAME["strict"]
    assert by["pfc"].after["pfc_en"] == 1 << 3 and by["pfc"].after["pfc_cap"] == 8
    apps = sorted(ch.after for ch in p.changes if ch.kind == "dcb_app")
    assert apps == [[dcb.SEL_DSCP, 3, 26], [dcb.SEL_DSCP, 6, 48]]


def test_roce_profile_in_sync_nic_gives_empty_plan_and_conflicting_dscp_is_removed() -> None:
    c = cfg({"profile": "roce-lossless", "ecn_knobs": []})
    d = c.qos.dcb
    ets = dcb.Ets(tc_tx_bw=d.tc_bw, tc_tsa=tuple(dcb.TSA_BY_NAME[t] for t in d.tc_tsa), prio_tc=d.prio_tc)
    apps = (dcb.App(dcb.SEL_DSCP, 3, 26), dcb.App(dcb.SEL_DSCP, 6, 48))
    good = dcb.DcbState("ens1f0", ets=ets, pfc=dcb.Pfc(pfc_cap=8, pfc_en=8), apps=apps, dcbx=0x09)
    assert make_plan(c, roce_obs(good)).changes == []
    conflict = replace(good, apps=(*apps, dcb.App(dcb.SEL_DSCP, 0, 26)))
    p = make_plan(c, roce_obs(conflict))
    assert [(ch.kind, ch.before, ch.after) for ch in p.changes] == [("dcb_app", [5, 0, 26], None)]


def test_nic_without_dcb_and_a_dcb_agent_are_blockers() -> None:
    c = cfg({"profile": "roce-lossless"})
    o = roce_obs(dcb.DcbState("ens1f0"))
    o.dcb = {"ens1f0": "this NIC has no DCB support: interface ens1f0"}
    o.dcb_agents = ["lldpad (pid 42)"]
    msgs = [b["message"] for b in make_plan(c, o).blockers]
    assert any("lldpad (pid 42)" in m for m in msgs)
    assert any("no DCB support" in m and "ens1f0" in m for m in msgs)


def test_tcp_profile_marks_storage_ports_and_needs_nft() -> None:
    c = cfg({"profile": "tcp-dctcp"})
    o = in_sync_obs(c)
    o.dscp_mark = None
    (ch,) = make_plan(c, o).changes
    assert ch.kind == "dscp_mark" and ch.after == "nodeos storage dscp 10 ports 4420"
    assert marking.parse_comment(ch.after) == (10, (4420,))
    o.dscp_mark = marking.NFT_MISSING
    assert "nftables" in make_plan(c, o).blockers[0]["message"]


def test_nft_script_marks_both_directions_and_families() -> None:
    text = marking.render(10, (4420, 8009))
    assert text.count("dscp set 10") == 4 and "{ 4420, 8009 }" in text
    assert "hook output priority mangle" in text
