"""REST bearer tokens: only their hash is kept; a wrong secret, a revoked record or a malformed
token gets no role; a read-only role calls only methods that change nothing."""

from __future__ import annotations

import pytest

from nodeos.rest import tokens


@pytest.mark.parametrize("role", ["admin", "read-only"])
def test_a_token_checks_against_its_record_only(role: str) -> None:
    token, token_id, record = tokens.new_token(role)
    assert tokens.token_id_of(token) == token_id and token.split("_", 2)[2] not in record
    assert tokens.role_of(token, record) == role
    other, _, other_record = tokens.new_token(role)
    assert tokens.role_of(other, record) is None and tokens.role_of(token, other_record) is None
    assert tokens.role_of(token, tokens.REVOKED) is None
    assert tokens.role_of(token, None) is None


@pytest.mark.parametrize("bearer", ["", "nodeos", "nodeos_xyz_abc", "Bearer nodeos_00_11"])
def test_a_malformed_token_has_no_id(bearer: str) -> None:
    assert tokens.token_id_of(bearer) is None


def test_roles() -> None:
    assert tokens.allows("admin", write=True) and tokens.allows("read-only", write=False)
    assert not tokens.allows("read-only", write=True)
    with pytest.raises(ValueError):
        tokens.new_token("root")
