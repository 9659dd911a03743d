"""Rotating the cluster secret: the roll's states and transitions (pure), the map command, what
a joiner gets, and peers that accept two generations during a roll (real loopback sockets);
rotating the CA: a member's steps and the certificate checks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgpack
import pytest

from nodeos.cluster import caroll, tlsca
from nodeos.cluster import secretroll as roll
from nodeos.cluster import token as tokens
from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.errors import AlreadyExists, BadInput
from tests.unit.cluster.test_transport import CLUSTER, Node

OLD, NEW = b"o" * 32, b"n" * 32
FP_NEW = roll.fingerprint(NEW)


def switch(gen: int = 1, fp: bytes = FP_NEW) -> dict[str, Any]:
    return {"gen": gen, "phase": "switch", "fp": fp}


def stable(gen: int = 1, fp: bytes = FP_NEW) -> dict[str, Any]:
    return {"gen": gen, "phase": "stable", "fp": fp}


# --- the map's section: stable g -> switch g+1 -> stable g+1 ---------------------------------


def test_a_roll_goes_stable_switch_stable_one_generation_at_a_time() -> None:
    s0 = roll.empty_section()
    s1 = roll.next_section(s0, switch())
    assert s1 == switch()
    assert roll.next_section(s1, stable()) == stable()
    assert roll.next_section(stable(), switch(2, b"x" * 16)) == switch(2, b"x" * 16)


@pytest.mark.parametrize(
    ("cur", "step", "field"),
    [
        (roll.empty_section(), stable(), "gen"),  # no roll under way: nothing to finish
        (roll.empty_section(), switch(2), "gen"),  # skips a generation
        (switch(), switch(2), "gen"),  # a second roll while one is under way
        (switch(), stable(1, b"y" * 16), "gen"),  # finishes a roll to another secret
        (switch(), stable(2), "gen"),
        (roll.empty_section(), {"gen": 1, "phase": "drop", "fp": FP_NEW}, "phase"),
        (roll.empty_section(), {"gen": 0, "phase": "switch", "fp": FP_NEW}, "gen"),
        (roll.empty_section(), {"gen": 1, "phase": "switch", "fp": b"short"}, "fp"),
    ],
)
def test_a_step_out_of_order_is_refused_naming_the_field(
    cur: dict[str, Any], step: dict[str, Any], field: str
) -> None:
    with pytest.raises(BadInput) as exc:
        roll.next_section(cur, step)
    assert exc.value.field == field
    if field == "phase":
        assert exc.value.allowed == ["stable", "switch"]


def test_the_map_records_the_roll_and_its_events_and_rejects_a_bad_step_changing_nothing() -> None:
    m = ClusterMap()
    assert m.state["secret"] == roll.empty_section()
    bad = m.apply(1, encode_command("secret_roll", stable()))
    assert bad["error"]["field"] == "gen" and m.state["secret"] == roll.empty_section()
    assert m.apply(2, encode_command("secret_roll", switch()))["result"] == {"gen": 1, "phase": "switch"}
    m.apply(3, encode_command("secret_roll", stable()))
    assert m.state["secret"] == stable()
    kinds = [(e["kind"], e.get("step")) for e in m.state["events"]["log"]]
    assert kinds == [("secret_rotated", "switch"), ("secret_rotated", "stable")]
    # A snapshot from before rotation existed restores as generation 0, stable.
    old = ClusterMap()
    del old.state["secret"]
    m2 = ClusterMap()
    m2.restore(old.snapshot())
    assert roll.section(m2.state) == roll.empty_section()


# --- a member's keys ---------------------------------------------------------------------------


def test_a_member_stages_then_switches_then_drops_the_old_secret() -> None:
    k0 = roll.keys_of({"secret": OLD})  # an identity from before rotation: generation 0
    assert (k0.dial_gen, k0.dial) == (0, OLD)
    k1 = roll.stage(k0, 1, NEW)
    assert k1.dial == OLD and sorted(k1.secrets) == [0, 1]  # accepts both, still dials the old
    k2, problem = roll.reconcile(k1, switch())
    assert problem is None and k2.dial == NEW and sorted(k2.secrets) == [0, 1]
    k3, problem = roll.reconcile(k2, stable())
    assert problem is None and k3.dial == NEW and k3.secrets == {1: NEW}
    # Replaying older entries at start changes nothing.
    assert roll.reconcile(k3, switch()) == (k3, None)
    assert roll.reconcile(k3, roll.empty_section()) == (k3, None)
    # Kept in the identity record and read back the same.
    ident = roll.with_keys({"cluster_id": "c", "raft_id": 3}, k2)
    assert roll.keys_of(ident) == k2 and ident["secret"] == NEW and ident["raft_id"] == 3


def test_a_member_killed_after_staging_switches_when_it_sees_the_map() -> None:
    staged = roll.stage(roll.keys_of({"secret": OLD}), 1, NEW)
    ident = roll.with_keys({}, staged)  # what it kept durably before dying
    back, problem = roll.reconcile(roll.keys_of(ident), stable())  # the roll finished meanwhile
    assert problem is None and back.secrets == {1: NEW} and back.dial == NEW


def test_a_member_that_missed_the_roll_says_so_and_keeps_its_keys() -> None:
    k0 = roll.keys_of({"secret": OLD})
    same, problem = roll.reconcile(k0, switch())
    assert same == k0 and problem is not None and "join again with a fresh token" in problem
    wrong = roll.stage(k0, 1, b"w" * 32)  # staged by a leader whose roll never committed
    same, problem = roll.reconcile(wrong, switch())
    assert same == wrong and problem is not None


def test_stage_refuses_an_old_generation_and_unstage_keeps_the_dialled_one() -> None:
    k = roll.MemberKeys(2, {2: NEW})
    with pytest.raises(BadInput) as exc:
        roll.stage(k, 2, OLD)
    assert exc.value.field == "gen"
    assert roll.unstage(k, 2) == k
    assert roll.unstage(roll.stage(k, 3, OLD), 3) == k


def test_keys_never_print_a_secret() -> None:
    k = roll.stage(roll.keys_of({"secret": OLD}), 1, NEW)
    assert OLD.decode() not in repr(k) and NEW.decode() not in repr(k) and "gens=[0, 1]" in repr(k)


def test_a_joiner_during_a_roll_gets_every_accepted_secret_under_its_token() -> None:
    key = b"k" * 32
    k = roll.stage(roll.keys_of({"secret": OLD}), 1, NEW)
    wire = tokens.wrap_keys(key, k)
    packed = msgpack.packb(wire, use_bin_type=True)
    assert OLD not in packed and NEW not in packed
    assert tokens.unwrap_keys(key, wire) == k
    # A member from before rotation sends one secret and no generation.
    assert tokens.unwrap_keys(key, {"secret": tokens.wrap_secret(key, OLD)}) == roll.MemberKeys(0, {0: OLD})


def test_the_new_secret_travels_under_a_key_only_holders_of_the_old_one_derive() -> None:
    wrapped = tokens.wrap_secret(roll.wrap_key(OLD, 1), NEW)
    assert tokens.unwrap_secret(roll.wrap_key(OLD, 1), wrapped) == NEW
    assert tokens.unwrap_secret(roll.wrap_key(b"z" * 32, 1), wrapped) != NEW
    assert tokens.unwrap_secret(roll.wrap_key(OLD, 2), wrapped) != NEW


# --- peers during a roll (real loopback sockets) -------------------------------------------------


def test_during_a_roll_peers_accept_either_generation_and_after_it_only_the_new() -> None:
    async def main() -> None:
        acceptor = Node(2, OLD, CLUSTER, secret_gen=0, accepted={0: OLD, 1: NEW})
        await acceptor.t.listen("127.0.0.1", 0)
        old_dialer = Node(1, OLD, CLUSTER, secret_gen=0)
        new_dialer = Node(3, NEW, CLUSTER, secret_gen=1)
        for d in (old_dialer, new_dialer):
            d.t.set_peer(2, acceptor.t.advertise)
            assert (await d.t.request(2, "echo", {}))["from"] == d.t.node_id
        assert old_dialer.t.old_connections() == 0
        # The roll ends: the old generation is dropped. Its open connection is closed at its next
        # frame, and a new handshake with it is refused with a clear error.
        acceptor.t.set_keys(1, {1: NEW})
        with pytest.raises(Exception) as closed:
            await old_dialer.t.request(2, "echo", {}, timeout=3.0)
        assert "rotated" in str(closed.value)
        with pytest.raises(BadInput) as exc:
            await old_dialer.t.dial(acceptor.t.advertise, 2)
        assert exc.value.field == "secret" and "rotated away" in exc.value.message
        assert (await new_dialer.t.request(2, "echo", {}))["from"] == 3
        # A member that switches moves its idle connection to the new generation by itself.
        old_dialer.t.set_keys(1, {0: OLD, 1: NEW})
        assert (await old_dialer.t.request(2, "echo", {"after": 1}, timeout=5.0))["from"] == 1
        assert old_dialer.t.old_connections() == 0
        for n in (acceptor, old_dialer, new_dialer):
            await n.t.close()

    asyncio.run(main())


def test_an_idle_connection_moves_to_the_new_generation_before_the_old_one_is_dropped() -> None:
    async def main() -> None:
        acceptor = Node(2, OLD, CLUSTER, secret_gen=0, accepted={0: OLD, 1: NEW})
        await acceptor.t.listen("127.0.0.1", 0)
        dialer = Node(1, OLD, CLUSTER, secret_gen=0)
        dialer.t.set_peer(2, acceptor.t.advertise)
        assert dialer.t.send_raft(2, {"i": 0})
        await acceptor.wait_for(1)
        dialer.t.set_keys(1, {0: OLD, 1: NEW})  # switch: the sender reconnects with generation 1
        for _ in range(100):
            if dialer.t.old_connections() == 0 and dialer.t._peers[2].session_gen == 1:
                break
            await asyncio.sleep(0.02)
        assert dialer.t._peers[2].session_gen == 1
        acceptor.t.set_keys(1, {1: NEW})  # stable: nothing is lost on the way
        for i in range(1, 20):
            assert dialer.t.send_raft(2, {"i": i})
        await acceptor.wait_for(20)
        assert [m["i"] for _, m in acceptor.got] == list(range(20))
        await dialer.t.close()
        await acceptor.t.close()

    asyncio.run(main())


def test_the_leader_lets_a_member_left_behind_join_again_only_once_it_is_removed(tmp_path: Path) -> None:
    from nodeos.cluster.leader_ops import leader_join
    from tests.unit.cluster.test_driver import leader_of, make_cluster, shutdown

    async def main() -> None:
        members = await make_cluster(tmp_path, 1)  # one voter: no election to race with
        try:
            d = (await leader_of(members)).driver
            assert d is not None
            peer = {"peer": "127.0.0.1:7102"}
            await d.propose(encode_command("add_node", {"node_id": 2, "addresses": peer}))
            # Its log is gone (it joins again from scratch): it must not come back as the member it was.
            with pytest.raises(AlreadyExists) as exc:
                await leader_join(d, {"node_id": 2, "addresses": peer, "rejoin": True}, 5.0)
            assert exc.value.field == "node_id" and "remove it first" in exc.value.message
            assert 2 not in d.conf_state.learners
            await d.propose(encode_command("remove_node", {"node_id": 2}))
            out = await leader_join(d, {"node_id": 2, "addresses": peer, "rejoin": True}, 5.0)
            assert out["leader"] == 1 and 2 in d.map.nodes and 2 in d.conf_state.learners
        finally:
            await shutdown(members)

    asyncio.run(main())


# --- the CA roll: a member's steps (nodeos/cluster/caroll.py) and the certificates' checks ---------


def test_a_member_presents_its_new_certificate_at_the_switch_and_trusts_only_the_new_ca_at_stable() -> None:
    fp = b"f" * 16
    ca_switch, ca_stable = switch(1, fp), stable(1, fp)
    staged = caroll.MemberCa(gen=0, new_fp=fp, new_cert_ready=True, presenting_new=False)
    assert caroll.actions(staged, roll.empty_section()) == ([], None)  # nothing committed yet
    assert caroll.actions(staged, ca_switch) == (["present_new"], None)
    presenting = caroll.MemberCa(0, fp, True, True)
    assert caroll.actions(presenting, ca_switch) == ([], None)
    assert caroll.actions(presenting, ca_stable) == (["finish"], None)
    assert caroll.actions(staged, ca_stable) == (["present_new", "finish"], None)  # killed in between
    done = caroll.MemberCa(1, None, False, False)
    assert caroll.actions(done, ca_stable) == ([], None)
    assert caroll.actions(caroll.MemberCa(1, fp, False, False), ca_stable) == (["cleanup"], None)


def test_a_member_without_the_new_ca_or_its_certificate_says_so() -> None:
    fp = b"f" * 16
    for m in (caroll.MemberCa(0, None, False, False), caroll.MemberCa(0, b"x" * 16, True, False)):
        steps, problem = caroll.actions(m, switch(1, fp))
        assert steps == [] and problem is not None and "fresh token" in problem
    steps, problem = caroll.actions(caroll.MemberCa(0, fp, False, False), switch(1, fp))
    assert steps == [] and problem is not None and "no certificate" in problem


def test_certificates_say_which_ca_signed_them_and_for_which_key() -> None:
    _, old_ca = tlsca.make_ca("c")
    new_key, new_ca = tlsca.make_ca("c", 1)
    assert tlsca.subject_cns(old_ca + new_ca) == {"nodeos cluster CA c", "nodeos cluster CA c g1"}
    key, csr = tlsca.make_request(3, "c")
    other_key, _ = tlsca.make_request(3, "c")
    cert = tlsca.sign_request(new_key, new_ca, csr, 3)
    assert tlsca.issued_by(cert, new_ca) and tlsca.issued_by(cert, new_ca, key)
    assert not tlsca.issued_by(cert, old_ca) and not tlsca.issued_by(cert, new_ca, other_key)
    assert tlsca.cert_fp(new_ca) != tlsca.cert_fp(old_ca) and len(tlsca.cert_fp(new_ca)) == 16
    m = ClusterMap()
    m.apply(1, encode_command("ca_roll", switch(1, tlsca.cert_fp(new_ca))))
    assert m.state["ca"]["phase"] == "switch" and m.state["secret"] == roll.empty_section()


# --- where the CA lives: any member may drive a roll and then holds the new CA ----------------


def test_the_map_says_which_member_holds_the_ca_from_init_through_rolls() -> None:
    m = ClusterMap()
    m.apply(1, encode_command("init_cluster", {"cluster_id": "c", "ca_holder": 1}))
    assert m.state["ca"] == {**roll.empty_section(), "holder": 1}
    m.apply(2, encode_command("ca_roll", {**switch(1), "holder": 2}))
    assert m.state["ca"]["holder"] == 2  # the new CA's key is on the member that drove the roll
    m.apply(3, encode_command("ca_roll", stable(1)))
    assert m.state["ca"] == {**stable(1), "holder": 2}
    out = m.apply(4, encode_command("ca_roll", {**switch(2), "holder": 0}))
    assert out["error"]["field"] == "holder" and m.state["ca"]["holder"] == 2  # refused: nothing changed


def test_a_member_stages_one_roll_at_a_time() -> None:
    old, new = b"o" * 16, b"n" * 16
    members = {1, 2, 3}
    assert caroll.stage_refusal(None, None, 0.0, new, 2, members) is None  # nothing staged
    assert caroll.stage_refusal(old, 2, 5.0, new, 2, members) is None  # the same roller again
    why = caroll.stage_refusal(old, 3, 5.0, new, 2, members)
    assert why is not None and "driven by node 3" in why  # two rollers at once: refused, not mixed
    assert caroll.stage_refusal(old, 4, 5.0, new, 2, members) is None  # its roller was removed
    assert (
        caroll.stage_refusal(old, 3, caroll.STALE_STAGE_S, new, 2, members) is None
    )  # a dead roll's leftover


def test_status_says_when_the_cas_node_cannot_sign_joins_and_what_to_run() -> None:
    assert caroll.holder_warning(1, {1, 2, 3}, down=False) is None
    assert caroll.holder_warning(None, {2, 3}, down=False) is None  # a map from before it was kept
    down = caroll.holder_warning(1, {1, 2, 3}, down=True)
    assert down is not None and "is down" in down and "nodeos cluster remove 1" in down
    gone = caroll.holder_warning(1, {2, 3}, down=False)
    assert gone is not None and "no longer a member" in gone and "nodeos cluster rotate-ca" in gone


def test_a_key_matches_only_its_own_certificate() -> None:
    key, ca = tlsca.make_ca("c")
    other, _ = tlsca.make_ca("c", 1)
    assert tlsca.key_matches(ca, key) and not tlsca.key_matches(ca, other)
    assert not tlsca.key_matches(b"not a certificate", key)
