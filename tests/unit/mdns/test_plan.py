"""The mDNS plan (pure): which records on which interfaces, and why others are not advertised."""

from __future__ import annotations

from dataclasses import replace

from nodeos.mdns.plan import (
    SERVICE_TYPE,
    Advert,
    Facts,
    Options,
    bind_addresses,
    decide,
    label,
    management_interfaces,
)
from nodeos.validate import DISCOVERY_NQN

FACTS = Facts(
    node_name="sn1",
    listeners=(("tcp", "10.7.0.1"), ("rdma", "10.7.0.1"), ("tcp", "10.9.0.1"), ("tcp", "192.0.2.1")),
    interfaces=(
        ("lo", "127.0.0.1"),
        ("stor0", "10.7.0.1"),
        ("stor0", "fe80::1"),
        ("stor1", "10.9.0.1"),
        ("mgmt0", "192.0.2.1"),
    ),
    discovery_port=8009,
    nqn=DISCOVERY_NQN,
    management_addresses=frozenset({"192.0.2.1"}),
)


def where(adverts: frozenset[Advert]) -> set[tuple[str, str, tuple[str, ...]]]:
    return {(a.interface, a.protocol, a.addresses) for a in adverts}


def test_one_record_per_storage_interface_and_transport_with_tp8009_txt() -> None:
    d = decide(FACTS, Options())
    assert where(d.adverts) == {
        ("stor0", "tcp", ("10.7.0.1",)),
        ("stor0", "roce", ("10.7.0.1",)),
        ("stor1", "tcp", ("10.9.0.1",)),
    }
    for a in d.adverts:
        assert a.port == 8009
        assert a.txt() == {"p": a.protocol, "nqn": "nqn.2014-08.org.nvmexpress.discovery"}
        assert a.name == f"{a.instance}.{SERVICE_TYPE}" and SERVICE_TYPE == "_nvme-disc._tcp.local."
    # Names: unique per interface and transport; one host name per interface.
    assert len({a.instance for a in d.adverts}) == 3
    assert {a.host for a in d.adverts} == {"sn1-stor0.local.", "sn1-stor1.local."}


def test_management_interface_is_left_out_unless_allowed() -> None:
    d = decide(FACTS, Options())
    assert "mgmt0" not in {a.interface for a in d.adverts}
    assert any("mgmt0 is a management interface" in n for n in d.notes)
    allowed = decide(FACTS, Options(management=True))
    assert ("mgmt0", "tcp", ("192.0.2.1",)) in where(allowed.adverts)


def test_management_interfaces_named_by_the_network_config_or_holding_a_listen_address() -> None:
    named = replace(FACTS, management_addresses=frozenset(), management_interfaces=frozenset({"stor1"}))
    assert management_interfaces(named) == {"stor1"}
    assert {a.interface for a in decide(named, Options()).adverts} == {"stor0", "mgmt0"}
    # An address written differently (IPv6 forms) still names its interface.
    v6 = replace(
        FACTS,
        listeners=(("tcp", "2001:db8::1"),),
        interfaces=(("stor0", "2001:db8::1"),),
        management_addresses=frozenset({"2001:DB8:0:0::1"}),
    )
    assert management_interfaces(v6) == {"stor0"}
    assert decide(v6, Options()).adverts == frozenset()


def test_nothing_when_drained_down_empty_without_discovery_or_switched_off() -> None:
    for facts, opts, why in (
        (replace(FACTS, draining=True), Options(), "draining"),
        (replace(FACTS, dataplane_down=True), Options(), "data plane is down"),
        (replace(FACTS, serving=False), Options(), "exports nothing"),
        (replace(FACTS, discovery_port=None), Options(), "no discovery controller"),
        (FACTS, Options(enabled=False), "mdns = false"),
    ):
        d = decide(facts, opts)
        assert d.adverts == frozenset(), why
        assert any(why in n for n in d.notes), (why, d.notes)


def test_addresses_follow_the_interfaces_as_they_are_now() -> None:
    # 10.9.0.1 left stor1: its record goes; it moved to stor2: the record follows it.
    gone = replace(FACTS, interfaces=tuple(i for i in FACTS.interfaces if i[1] != "10.9.0.1"))
    d = decide(gone, Options())
    assert "stor1" not in {a.interface for a in d.adverts}
    assert any("10.9.0.1 is on no interface" in n for n in d.notes)
    moved = replace(gone, interfaces=(*gone.interfaces, ("stor2", "10.9.0.1")))
    assert ("stor2", "tcp", ("10.9.0.1",)) in where(decide(moved, Options()).adverts)


def test_loopback_link_local_and_unknown_transports_are_never_advertised() -> None:
    facts = replace(
        FACTS,
        listeners=(("tcp", "127.0.0.1"), ("tcp", "fe80::1"), ("fc", "10.7.0.1"), ("tcp", "not-an-ip")),
        management_addresses=frozenset(),
    )
    assert decide(facts, Options(management=True)).adverts == frozenset()


def test_several_addresses_of_one_interface_share_its_records_and_the_plan_is_stable() -> None:
    facts = replace(
        FACTS,
        listeners=(("tcp", "2001:db8::7"), ("tcp", "10.7.0.1"), ("tcp", "10.7.0.5")),
        interfaces=(("stor0", "10.7.0.5"), ("stor0", "10.7.0.1"), ("stor0", "2001:db8::7")),
        management_addresses=frozenset(),
    )
    d = decide(facts, Options())
    assert where(d.adverts) == {("stor0", "tcp", ("10.7.0.1", "10.7.0.5", "2001:db8::7"))}
    # The publisher binds one socket per family and interface.
    assert bind_addresses(d.adverts) == {"stor0": ("10.7.0.1", "2001:db8::7")}
    reordered = replace(facts, listeners=facts.listeners[::-1], interfaces=facts.interfaces[::-1])
    assert decide(reordered, Options()) == d  # same facts, same records: nothing to redo


def test_host_names_carry_a_few_characters_of_the_node_id() -> None:
    # Two clusters on one network may each have an "sn1": their host names still differ.
    a = decide(replace(FACTS, node_id="0a1b2c3d4e5f"), Options()).adverts
    b = decide(replace(FACTS, node_id="ffeeddccbbaa"), Options()).adverts
    assert {x.host for x in a} == {"sn1-stor0-0a1b2c.local.", "sn1-stor1-0a1b2c.local."}
    assert not {x.host for x in a} & {x.host for x in b}


def test_labels_are_dns_labels() -> None:
    assert label("sn1-eth0.100-tcp") == "sn1-eth0-100-tcp"
    long = label("n" * 70 + "-stor0")
    assert len(long) == 63 and long != label("n" * 70 + "-stor1")
