"""Hosts' TLS in the cluster map (host_add v2, host_update) and the leader's decisions
(nodeos/control/host_api.py): the rules every node applies alike."""

from __future__ import annotations

from typing import Any

import pytest

from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.control import host_api
from nodeos.errors import BadInput

H1, H2 = "nqn.2014-08.com.example:h1", "nqn.2014-08.com.example:h2"
SEALED = "nodeos-sealed-1:abcd:xyz"


class M:
    def __init__(self) -> None:
        self.m = ClusterMap()
        self.i = 0

    def do(self, cmd: str, v: int = 1, **args: Any) -> dict[str, Any]:
        self.i += 1
        return self.m.apply(self.i, encode_command(cmd, args, v))

    def ok(self, cmd: str, v: int = 1, **args: Any) -> Any:
        out = self.do(cmd, v, **args)
        assert "error" not in out, out
        return out["result"]

    @property
    def st(self) -> dict[str, Any]:
        return self.m.state


def with_volume() -> M:
    m = M()
    m.ok("add_node", node_id=1, name="s1")
    m.ok("pool_create", node_id=1, name="p", pool_id="pool1", drives=["d1"], devices=["/dev/x"])
    pools = {"pool1": {"state": "ready", "size_bytes": 100 << 30, "free_bytes": 100 << 30}}
    m.ok("node_report", node_id=1, seq=1, dataplane={"name": "kernel"}, pools=pools)
    m.ok(
        "volume_create",
        uuid="u",
        name="v",
        nqn="nqn.x:u",
        size_bytes=1 << 30,
        placement=[{"node": 1, "pool_id": "pool1"}],
    )
    return m


def test_a_host_with_tls_is_registered_with_its_sealed_key_and_shown_without_it() -> None:
    m = with_volume()
    out = m.ok("host_add", 2, nqn=H1, tls="required", tls_key=SEALED)
    assert out["tls"] == "required" and "tls_key" not in out
    assert m.st["hosts"][H1]["tls_key"] == SEALED
    # a key must be sealed, a policy must be known, a key needs a policy
    assert (
        m.do("host_add", 2, nqn=H2, tls="required", tls_key="NVMeTLSkey-1:01:x:")["error"]["field"]
        == "tls_key"
    )
    assert m.do("host_add", 2, nqn=H2, tls="sometimes", tls_key=SEALED)["error"]["field"] == "tls"
    assert m.do("host_add", 2, nqn=H2, tls_key=SEALED)["error"]["field"] == "tls"
    assert H2 not in m.st["hosts"]  # nothing changed


def test_a_tls_only_volume_is_not_granted_to_a_host_without_a_key() -> None:
    m = with_volume()
    m.ok("host_add", 2, nqn=H1, tls="required", tls_key=SEALED)
    m.ok("host_add", nqn=H2, dhchap_secret=None)
    m.ok("volume_hosts", name="v", host=H1, add=True)
    err = m.do("volume_hosts", name="v", host=H2, add=True)["error"]
    assert err["code"] == "bad_input" and err["field"] == "host" and H2 in err["message"]
    assert m.st["volumes"]["u"]["hosts"] == [H1]
    # once H2 has a key (allowed), both may share it
    m.ok("host_update", nqn=H2, tls="allowed", tls_key=SEALED + "2")
    assert m.ok("volume_hosts", name="v", host=H2, add=True)["changed"] is True
    # and H2 cannot drop its key while it shares a TLS-only volume
    err = m.do("host_update", nqn=H2, tls="off")["error"]
    assert err["field"] == "tls" and m.st["hosts"][H2]["tls"] == "allowed"


def test_host_update_keeps_or_replaces_the_key_and_records_an_event() -> None:
    m = with_volume()
    m.ok("host_add", nqn=H1, dhchap_secret=None)
    assert m.do("host_update", nqn=H1, tls="required")["error"]["field"] == "tls_key"  # no key yet
    assert m.do("host_update", nqn=H1, tls_key=SEALED)["error"]["field"] == "tls"  # TLS is off
    assert m.ok("host_update", nqn=H1, tls="required", tls_key=SEALED)["changed"] is True
    assert m.ok("host_update", nqn=H1, tls="allowed")["changed"] is True
    assert m.st["hosts"][H1]["tls_key"] == SEALED  # kept
    assert m.ok("host_update", nqn=H1, tls="allowed")["changed"] is False
    m.ok("host_update", nqn=H1, tls="off")
    assert "tls_key" not in m.st["hosts"][H1] and "tls" not in m.st["hosts"][H1]
    assert (
        m.do("host_update", nqn="nqn.2014-08.com.example:nobody", tls="off")["error"]["code"] == "not_found"
    )
    kinds = [e["kind"] for e in m.st["events"]["log"]]
    assert kinds.count("host_tls_changed") == 3


def test_tls_needs_tcp_somewhere() -> None:
    m = with_volume()
    st = m.st
    assert host_api.tcp_reachable(st)  # nothing reported yet: nothing refused
    st["reports"][1] = {"dataplane": {"listeners": [{"trtype": "rdma", "traddr": "10.0.0.1"}]}}
    with pytest.raises(BadInput) as ei:
        host_api.decide_host_add(st, {"nqn": H1, "tls": "required", "tls_key": "k"})
    assert ei.value.field == "tls"
    assert host_api.decide_host_add(st, {"nqn": H1, "tls": "off"})[0] == "host_add"
    st["reports"][1]["dataplane"]["listeners"].append({"trtype": "tcp", "traddr": "10.0.0.1"})
    assert host_api.decide_host_add(st, {"nqn": H1, "tls": "required", "tls_key": "k"})[0] == "host_add"


def test_host_add_with_tls_is_version_2() -> None:
    assert host_api.command_version("host_add", {"tls": "required"}) == 2
    assert host_api.command_version("host_add", {"nqn": H1}) == 1
    assert host_api.command_version("host_update", {"tls": "required"}) == 1


def test_a_key_is_made_only_when_tls_needs_one() -> None:
    req: dict[str, Any] = {}
    made = host_api.tls_request({"tls": "required"}, req, has_key=False)
    assert made and req == {"tls": "required", "tls_key": made}
    req = {}
    assert host_api.tls_request({"tls": "allowed"}, req, has_key=True) is None and req == {"tls": "allowed"}
    req = {}
    assert host_api.tls_request({"new_tls_key": True}, req, has_key=True) == req["tls_key"]
    for bad in (
        {"tls": "off", "new_tls_key": True},
        {"tls": "off", "tls_key": "k"},
        {"tls_key": "k", "new_tls_key": True},
    ):
        with pytest.raises(BadInput):
            host_api.tls_request(bad, {}, has_key=False)


def test_a_hosts_psk_derivation_is_kept_with_its_tls_and_changes_the_export() -> None:
    from nodeos.agent.plan import secrets_digest

    m = with_volume()
    out = m.ok("host_add", 3, nqn=H1, tls="required", tls_key=SEALED, tls_derivation="compat")
    assert out["tls_derivation"] == "compat" and m.st["hosts"][H1]["tls_derivation"] == "compat"
    m.ok("volume_hosts", name="v", host=H1, add=True)
    vol = m.st["volumes"]["u"]
    compat = secrets_digest(m.st, vol)
    # a bad word names the field and the allowed values; nothing changed
    err = m.do("host_update", 2, nqn=H1, tls_derivation="legacy")["error"]
    assert err["field"] == "tls_derivation" and err["allowed"] == ["standard", "compat"]
    assert m.st["hosts"][H1]["tls_derivation"] == "compat"
    # back to standard: the record reads as one from before the choice, the export is re-applied
    done = m.ok("host_update", 2, nqn=H1, tls_derivation="standard")
    assert done["changed"] is True and "tls_derivation" not in m.st["hosts"][H1]
    assert secrets_digest(m.st, vol) != compat
    assert "PSK derivation standard" in m.st["events"]["log"][-1]["message"]
    # TLS off drops it with the key
    m.ok("host_update", 2, nqn=H1, tls="allowed", tls_derivation="compat")
    m.ok("volume_hosts", name="v", host=H1, add=False)
    m.ok("host_update", nqn=H1, tls="off")
    assert "tls_derivation" not in m.st["hosts"][H1]


def test_a_derivation_is_a_new_command_version_sent_only_when_it_says_something() -> None:
    st = with_volume().st
    st["hosts"][H1] = {"nqn": H1, "tls": "required", "tls_key": SEALED}
    # standard on a standard host: the field is left out, so older members' versions still serve
    cmd, args = host_api.decide_host_update(st, {"nqn": H1, "tls_derivation": "standard"})
    assert "tls_derivation" not in args and host_api.command_version(cmd, args) == 1
    cmd, args = host_api.decide_host_update(st, {"nqn": H1, "tls_derivation": "compat"})
    assert host_api.command_version(cmd, args) == 2
    cmd, args = host_api.decide_host_add(st, {"nqn": H2, "tls": "required", "tls_derivation": "compat"})
    assert host_api.command_version(cmd, args) == 3
    cmd, args = host_api.decide_host_add(st, {"nqn": H2, "tls": "required", "tls_derivation": "standard"})
    assert host_api.command_version(cmd, args) == 2
    # a derivation means nothing without TLS
    with pytest.raises(BadInput) as ei:
        host_api.decide_host_add(st, {"nqn": H2, "tls_derivation": "compat"})
    assert ei.value.field == "tls_derivation"
    st["hosts"][H2] = {"nqn": H2}
    with pytest.raises(BadInput) as ei:
        host_api.decide_host_update(st, {"nqn": H2, "tls_derivation": "compat"})
    assert ei.value.field == "tls_derivation"
