"""Any value anywhere in a configuration: the parser answers with a Plan or with BadInput naming
the field and what it allows; never another exception (a bad type is an error, not a crash)."""

from __future__ import annotations

import shlex
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from nodeos.errors import BadInput
from nodeos.provision import sources
from nodeos.provision.apply import check_found
from nodeos.provision.model import parse

from .helpers import valid

SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.sampled_from(["", "eth0", "192.0.2.11", "192.0.2.11/24", "0.0.0.0/0", "::1", "init", "join", "a:1"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=10,
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


@settings(max_examples=100)
@given(data=st.data(), value=VALUES)
def test_any_value_anywhere_is_a_plan_or_a_named_refusal(data: st.DataObject, value: Any) -> None:
    doc = valid()
    path = data.draw(st.sampled_from(_paths(doc)))
    cur: Any = doc
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    try:
        parse(doc, "/cfg")
    except BadInput as err:
        assert err.field, err.to_dict()
        assert err.allowed not in (None, "", []), err.to_dict()


@settings(max_examples=100)
@given(key=st.text(max_size=16), value=VALUES)
def test_any_extra_key_is_refused_by_name(key: str, value: Any) -> None:
    doc = valid()
    doc[key] = value
    try:
        parse(doc)
    except BadInput as err:
        assert err.field and err.allowed, err.to_dict()


@example(words=[("nodeos.peer_port", "²")])  # a digit to str.isdigit(), not to int()
@settings(max_examples=100)
@given(
    words=st.lists(
        st.tuples(
            st.sampled_from([*sources.CMDLINE_KEYS, "nodeos.bogus", "nodeos.lab", "quiet"]),
            st.one_of(
                st.text(max_size=30), st.sampled_from(["eth0:192.0.2.1/24", "eth0:9000", "join", "a=b"])
            ),
        ),
        max_size=8,
    )
)
def test_any_kernel_command_line_is_a_plan_or_a_named_refusal(words: list[tuple[str, str]]) -> None:
    text = " ".join(shlex.quote(f"{k}={v}") for k, v in words)
    found = sources.from_cmdline(text)
    if found is None:
        return
    try:
        check_found(found)
    except BadInput as err:
        assert err.field and err.allowed not in (None, "", []), err.to_dict()
