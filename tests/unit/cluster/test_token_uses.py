"""Join tokens of limited uses (issue 25, probe 11): the issuer's record, the count kept in the
replicated map (two joins racing with a single-use token: exactly one gets in), and the
console refusing a bad `--uses` before any round trip."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from nodeos.cli.main import cli
from nodeos.cluster import token as tokens
from nodeos.cluster.map import ClusterMap, encode_command
from nodeos.cluster.token_map import uses_of
from nodeos.errors import BadInput

NO_DAEMON = {"NODEOS_SOCKET": "/nonexistent/nodeos-test/api.sock"}


def test_uses_default_to_any_number_and_bad_values_name_the_field() -> None:
    assert tokens.check_uses(None) is None and tokens.check_uses(1) == 1
    for bad in (0, -1, tokens.MAX_USES + 1, "1", 1.0, True):
        with pytest.raises(BadInput) as e:
            tokens.check_uses(bad)
        assert e.value.field == "uses" and "1 to" in e.value.message


def test_only_a_token_of_limited_uses_asks_the_leader_to_count() -> None:
    any_tok, any_rec = tokens.issue("c1", "10.0.0.1:7100", 600, now=1000.0)
    one_tok, one_rec = tokens.issue("c1", "10.0.0.1:7100", 600, now=1000.0, uses=1)
    recs = {any_tok.token_id.hex(): any_rec, one_tok.token_id.hex(): one_rec}
    assert "uses" not in any_rec and tokens.use_request(recs, any_tok.token_id, 1001.0) is None
    assert tokens.use_request(recs, one_tok.token_id, 1001.0) == {
        "token_id": one_tok.token_id.hex(),
        "uses": 1,
        "expires": 1600.0,
        "now": 1001.0,
    }


def apply(m: ClusterMap, node: int, uses: int = 1, now: float = 1000.0, tid: str = "ab" * 16) -> Any:
    args = {"token_id": tid, "uses": uses, "expires": 1600.0, "now": now, "node_id": node}
    return m.apply(m.applied_index + 1, encode_command("use_join_token", args))


def test_two_joins_with_a_single_use_token_exactly_one_counts() -> None:
    m = ClusterMap()
    first, second = apply(m, 2), apply(m, 3)
    assert first == {"result": {"token_id": "ab" * 16, "used": 1, "uses": 1}}
    assert second["error"]["field"] == "token" and "token already used" in second["error"]["message"]
    assert "node 2" in second["error"]["message"]
    assert uses_of(m.state, "ab" * 16) == [2]
    # The node that joined asking again (its reply was lost) is not counted twice.
    assert "result" in apply(m, 2)
    # Every member applies the same commands in the same order: the same outcome everywhere.
    replica = ClusterMap()
    assert [apply(replica, n) for n in (2, 3, 2)] == [first, second, apply(ClusterMap(), 2)]


def test_a_token_of_n_uses_lets_n_nodes_in_and_expired_ones_are_dropped() -> None:
    m = ClusterMap()
    assert ["result" in apply(m, n, uses=2) for n in (2, 3, 4)] == [True, True, False]
    late = apply(m, 5, uses=2, now=1600.0, tid="cd" * 16)  # the proposer's clock says expired
    assert late["error"]["field"] == "token" and "expired" in late["error"]["message"]
    assert uses_of(m.state, "ab" * 16) == []  # pruned: the map does not keep them


@pytest.mark.parametrize("uses", ["0", "-3", "1001"])
def test_console_refuses_bad_uses_before_a_round_trip(uses: str) -> None:
    r = CliRunner().invoke(cli, ["cluster", "token", "--uses", uses, "--json"], env=NO_DAEMON)
    assert r.exit_code == 2, r.output
    err = json.loads(r.stdout)["error"]
    assert err["field"] == "uses" and "1 to 1000" in err["message"]
