"""Sealed host secrets (nodeos/cluster/datakey.py): the envelope, its round trip, and every way
it must fail (wrong key, no key, altered, moved to another host) without a secret in the error;
handing keys to members; the map's `host_seal`; and the leader's round that hands keys over and
re-seals plain secrets (nodeos/cluster/datakeys_member.py) against a real map."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from nodeos.cluster import datakey
from nodeos.cluster.datakeys_member import DataKeyHolder
from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.cluster.raft import StateRole
from nodeos.errors import BadInput, OperationFailed
from nodeos.node import model
from nodeos.validate import make_dhchap_secret

H1 = "nqn.2014-08.com.example:gpu-1"
H2 = "nqn.2014-08.com.example:gpu-2"
SECRET = make_dhchap_secret(bytes(range(32)))


def test_envelope_format_and_round_trip() -> None:
    keys = datakey.new_keys()
    sealed = datakey.seal(keys, H1, SECRET)
    assert sealed.startswith(datakey.PREFIX + keys.current + ":")
    assert datakey.is_sealed(sealed) and not datakey.is_sealed(SECRET) and not datakey.is_sealed(None)
    assert datakey.sealed_key_id(sealed) == keys.current
    assert SECRET not in sealed and SECRET.split(":")[2] not in sealed
    # Not a DHHC-1 string: a member from before passing it on is refused by its spec check.
    assert not sealed.startswith("DHHC-1:")
    assert datakey.open_secret(keys, H1, sealed) == SECRET
    assert datakey.seal(keys, H1, SECRET) != sealed  # a fresh nonce each time
    assert datakey.open_secret(keys, H1, SECRET) == SECRET  # plain text from before: as it is


def test_key_id_is_derived_from_the_key_and_keys_never_print() -> None:
    keys = datakey.new_keys()
    ((kid, key),) = keys.keys.items()
    assert kid == keys.current == datakey.key_id(key) and len(kid) == datakey.KID_CHARS
    assert key.hex() not in repr(keys) and str(key) not in repr(keys)


def test_wrong_key_fails() -> None:
    sealed = datakey.seal(datakey.new_keys(), H1, SECRET)
    other = datakey.new_keys()
    with pytest.raises(datakey.SecretUnreadable) as e:
        datakey.open_secret(other, H1, sealed)
    assert "does not hold" in e.value.message and H1 in e.value.message and SECRET not in e.value.message
    # Another key under the same id (an id edited to match): the tag does not verify.
    forged = datakey.DataKeys(other.current, {datakey.sealed_key_id(sealed): other.keys[other.current]})
    with pytest.raises(datakey.SecretUnreadable, match="does not open"):
        datakey.open_secret(forged, H1, sealed)


def _tamper(sealed: str, at: int) -> str:
    head, blob = sealed.rsplit(":", 1)
    raw = bytearray(base64.urlsafe_b64decode(blob + "=" * (-len(blob) % 4)))
    raw[at] ^= 1
    return head + ":" + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


@pytest.mark.parametrize("at", [0, 12, 20, -1])  # nonce, ciphertext, ciphertext, tag
def test_tampered_ciphertext_fails(at: int) -> None:
    keys = datakey.new_keys()
    with pytest.raises(datakey.SecretUnreadable, match="does not open"):
        datakey.open_secret(keys, H1, _tamper(datakey.seal(keys, H1, SECRET), at))


@pytest.mark.parametrize("cut", ["", "AAAA", "!!!notbase64"])
def test_truncated_or_garbled_body_fails(cut: str) -> None:
    keys = datakey.new_keys()
    with pytest.raises(datakey.SecretUnreadable):
        datakey.open_secret(keys, H1, f"{datakey.PREFIX}{keys.current}:{cut}")


def test_a_secret_moved_to_another_host_does_not_open() -> None:
    keys = datakey.new_keys()
    with pytest.raises(datakey.SecretUnreadable, match="does not open"):
        datakey.open_secret(keys, H2, datakey.seal(keys, H1, SECRET))


def test_sealing_without_a_key_is_refused() -> None:
    with pytest.raises(OperationFailed, match="no cluster data key"):
        datakey.seal(datakey.DataKeys(None), H1, SECRET)


def test_open_hosts_marks_what_does_not_open_and_the_export_refuses_it() -> None:
    keys = datakey.new_keys()
    hosts = {
        H1: {"nqn": H1, "dhchap_secret": datakey.seal(keys, H1, SECRET), "added": 1.0},
        H2: {"nqn": H2, "dhchap_secret": None, "added": 1.0},
        "plain": {"nqn": "plain", "dhchap_secret": SECRET, "added": 1.0},
    }
    cache: dict[tuple[str, str], str] = {}
    opened = datakey.open_hosts(hosts, keys, cache)
    assert opened[H1]["dhchap_secret"] == SECRET and opened["plain"]["dhchap_secret"] == SECRET
    assert opened[H2]["dhchap_secret"] is None and len(cache) == 1
    assert hosts[H1]["dhchap_secret"] != SECRET  # the map's own record is left sealed
    access = model.host_access([H1, H2, "gone"], opened)
    assert [(a.host_nqn, a.dhchap_key) for a in access] == [(H1, SECRET), (H2, None)]

    lacking = datakey.open_hosts(hosts, datakey.new_keys())
    assert lacking[H1]["dhchap_secret"] is None and "does not hold" in lacking[H1]["dhchap_error"]
    assert model.host_access([H2], lacking)[0].host_nqn == H2  # a volume not granting H1 exports
    with pytest.raises(OperationFailed) as e:  # never an export of H1 without its key
        model.host_access([H1, H2], lacking)
    assert e.value.field == "dhchap_secret" and SECRET not in e.value.message


def test_identity_keeps_keys_and_drops_a_damaged_one() -> None:
    keys = datakey.new_keys()
    ident = datakey.with_keys({"cluster_id": "c", "secret": b"s" * 32}, keys)
    assert datakey.keys_of(ident) == keys
    assert datakey.keys_of({"cluster_id": "c"}) == datakey.DataKeys(None)  # from before
    bad = {**ident, "data_keys": {keys.current: b"x" * 32}}  # not the key its id names
    assert datakey.keys_of(bad) == datakey.DataKeys(None, {})


def test_keys_travel_wrapped_and_only_under_the_right_key() -> None:
    keys = datakey.add_key(datakey.new_keys(), bytes(32), current=False)
    wrap_key = bytes(range(32))
    msg = datakey.wrap_keys(wrap_key, keys)
    for k in keys.keys.values():
        assert k not in repr(msg).encode() and k.hex() not in repr(msg)
    assert datakey.unwrap_keys(wrap_key, msg) == keys
    with pytest.raises(BadInput, match="does not open"):
        datakey.unwrap_keys(bytes(32), msg)
    kid = keys.current
    moved = {"current": kid, "keys": {kid[::-1]: msg["keys"][kid]}}  # under another id
    with pytest.raises(BadInput):
        datakey.unwrap_keys(wrap_key, moved)
    with pytest.raises(BadInput, match="no cluster data keys"):
        datakey.unwrap_keys(wrap_key, None)
    mine = datakey.new_keys()
    merged = datakey.merge(mine, keys)
    assert merged.current == keys.current and set(merged.keys) == set(mine.keys) | set(keys.keys)


# --- the map's host_seal ---------------------------------------------------------------------


def _map_with_hosts() -> ClusterMap:
    m = ClusterMap()
    m.apply(1, encode_command("host_add", {"nqn": H1, "dhchap_secret": SECRET, "added": 5.0}))
    m.apply(2, encode_command("host_add", {"nqn": H2, "dhchap_secret": None, "added": 5.0}))
    return m


def test_host_seal_replaces_only_the_plain_secret_it_was_made_from() -> None:
    m = _map_with_hosts()
    keys = datakey.new_keys()
    sealed = datakey.seal(keys, H1, SECRET)
    stale = {"nqn": H1, "added": 4.0, "sealed": sealed}  # the host was added again meanwhile
    out = m.apply(
        3, encode_command("host_seal", {"hosts": [stale, {"nqn": H2, "added": 5.0, "sealed": sealed}]})
    )
    assert out["result"] == {"sealed": 0, "skipped": 2} and m.state["hosts"][H1]["dhchap_secret"] == SECRET
    out = m.apply(4, encode_command("host_seal", {"hosts": [{"nqn": H1, "added": 5.0, "sealed": sealed}]}))
    assert out["result"]["sealed"] == 1 and m.state["hosts"][H1]["dhchap_secret"] == sealed
    again = datakey.seal(keys, H1, SECRET)
    m.apply(5, encode_command("host_seal", {"hosts": [{"nqn": H1, "added": 5.0, "sealed": again}]}))
    assert m.state["hosts"][H1]["dhchap_secret"] == sealed  # sealed already: left as it is
    out = m.apply(6, encode_command("host_seal", {"hosts": [{"nqn": H1, "added": 5.0, "sealed": SECRET}]}))
    assert out["error"]["field"] == "hosts"  # only a sealed value may go in
    assert SECRET not in repr(m.state["rejected"])


# --- the leader's round ----------------------------------------------------------------------


class FakeDriver:
    def __init__(self, m: ClusterMap) -> None:
        self.map = m
        self.id = 1
        self.role = StateRole.LEADER

    async def propose(self, data: bytes, timeout: float) -> Any:
        out = self.map.apply(self.map.applied_index + 1, data)
        if "error" in out:
            raise BadInput(out["error"]["message"])
        return out["result"]


class Member(DataKeyHolder):
    """A member's keys and the peer requests between members, without processes."""

    def __init__(self, nid: int, ident: dict[str, Any], peers: dict[int, Member]) -> None:
        self.nid = nid
        self.identity = ident
        self.peers = peers
        self.transport = None
        self.driver = None
        self.ctx = None
        self.old = False  # a member from before: knows no datakey requests

    def _save_identity(self, ident: dict[str, Any] | None) -> None:
        self.identity = ident

    def _others(self, d: Any) -> list[int]:
        return sorted(m for m in self.peers if m != self.nid)

    async def _ask_all(
        self, members: list[int], method: str, params: dict[str, Any], timeout: float
    ) -> dict[int, Any]:
        out: dict[int, Any] = {}
        for m in members:
            p = self.peers[m]
            try:
                if p.old:
                    raise BadInput(f"unknown peer method {method!r}", field="method")
                out[m] = await p.datakey_peer_request(self.nid, method, params)
            except BadInput as err:
                out[m] = err
        return out


def _members(n: int, keys: datakey.DataKeys | None) -> dict[int, Member]:
    peers: dict[int, Member] = {}
    for i in range(1, n + 1):
        ident: dict[str, Any] = {"cluster_id": "c", "secret": b"k" * 32, "raft_id": i}
        peers[i] = Member(i, ident if keys is None else datakey.with_keys(ident, keys), peers)
    return peers


def test_a_cluster_from_before_gets_a_key_everywhere_and_its_plain_secrets_sealed() -> None:
    peers = _members(3, None)  # every member from before sealing: no data key anywhere
    m = _map_with_hosts()
    d = FakeDriver(m)
    peers[3].old = True
    with pytest.raises(OperationFailed, match="node 3"):  # a member cannot take the key
        asyncio.run(peers[1].datakey_round(d))
    assert m.state["hosts"][H1]["dhchap_secret"] == SECRET  # nothing sealed
    assert peers[1].data_keys().current is None  # the key made is not used while one lacks it
    peers[3].old = False
    assert asyncio.run(peers[1].datakey_round(d)) is None
    kid = peers[1].data_keys().current
    assert kid is not None and all(kid in p.data_keys().keys for p in peers.values())
    sealed = m.state["hosts"][H1]["dhchap_secret"]
    assert datakey.is_sealed(sealed) and datakey.sealed_key_id(sealed) == kid
    for p in peers.values():  # every member opens it with its own copy of the key
        assert datakey.open_secret(p.data_keys(), H1, sealed) == SECRET
    # A member that cannot say which keys it holds (one from before joined): plain secrets stay.
    m.apply(m.applied_index + 1, encode_command("host_add", {"nqn": "h3", "dhchap_secret": SECRET}))
    peers[4] = Member(4, {"cluster_id": "c", "secret": b"k" * 32, "raft_id": 4}, peers)
    peers[4].old = True
    note = asyncio.run(peers[1].datakey_round(d))
    assert note is not None and "node 4" in note and m.state["hosts"]["h3"]["dhchap_secret"] == SECRET
    peers[4].old = False  # upgraded: handed the key, then the secret is sealed
    assert asyncio.run(peers[1].datakey_round(d)) is None
    assert datakey.is_sealed(m.state["hosts"]["h3"]["dhchap_secret"]) and peers[4].data_keys().keys


def test_a_member_that_joined_without_the_key_is_handed_it() -> None:
    keys = datakey.new_keys()
    peers = _members(2, keys)
    peers[2].identity = {k: v for k, v in peers[2].identity.items() if not k.startswith("data_key")}
    m = _map_with_hosts()
    sealed = datakey.seal(keys, H1, SECRET)
    m.apply(3, encode_command("host_seal", {"hosts": [{"nqn": H1, "added": 5.0, "sealed": sealed}]}))
    assert asyncio.run(peers[1].datakey_round(FakeDriver(m))) is None
    assert datakey.open_secret(peers[2].data_keys(), H1, sealed) == SECRET


def test_a_host_added_with_a_secret_is_sealed_by_the_leader() -> None:
    peers = _members(2, None)
    d = FakeDriver(ClusterMap())
    sealed = asyncio.run(peers[1].seal_host_secret(d, H1, SECRET))  # makes and hands the key first
    assert datakey.open_secret(peers[2].data_keys(), H1, sealed) == SECRET
    peers[2].old = True
    fresh = _members(2, None)
    fresh[2].old = True
    with pytest.raises(OperationFailed, match="node 2"):
        asyncio.run(fresh[1].seal_host_secret(d, H1, SECRET))
