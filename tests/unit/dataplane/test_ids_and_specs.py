"""Validators of the data plane's inputs (property-based where the space is large)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeos.dataplane.base import ExportSpec, HostAccess, Listener
from nodeos.dataplane.ids import (
    NQN_MAX_BYTES,
    check_id,
    check_nqn,
    check_serial,
    normalize_nguid,
    normalize_uuid,
)
from nodeos.dataplane.spec_checks import check_export_spec
from nodeos.errors import BadInput

GOOD_NQN = "nqn.2014-08.io.nodeos:vol:5b0e6f0a-2c1d-4e8f-9a3b-7c6d5e4f3a21"
HOST = "nqn.2014-08.org.nvmexpress:uuid:e52ef7e3-8dd4-5c77-bd33-58b42f28d002"


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=300))
def test_nqn_length_limit_is_223_bytes(tail: str) -> None:
    nqn = "nqn.2014-08.io.nodeos:" + tail
    if len(nqn.encode()) <= NQN_MAX_BYTES:
        assert check_nqn(nqn) == nqn
    else:
        with pytest.raises(BadInput) as e:
            check_nqn(nqn)
        assert e.value.field == "nqn" and "223" in e.value.message


@pytest.mark.parametrize(
    "bad", ["", "not-a-valid-nqn", "nqn.2014-08.io.x:a/b", "nqn.14-08.io.x:a", "nqn.2014-08.io x"]
)
def test_bad_nqns(bad: str) -> None:
    with pytest.raises(BadInput) as e:
        check_nqn(bad, "host_nqn")
    assert e.value.field == "host_nqn"


def test_uuid_host_nqn_is_accepted() -> None:
    assert check_nqn(HOST) == HOST


@given(st.text(min_size=0, max_size=60))
def test_ids_are_safe_for_paths_and_options(s: str) -> None:
    try:
        check_id(s, "vol_id")
    except BadInput as e:
        assert e.field == "vol_id"
        return
    assert "/" not in s and not s.startswith("-") and not s.startswith(".") and 1 <= len(s) <= 48
    assert s.isascii() and " " not in s


@given(st.uuids())
def test_nguid_forms_normalize_alike(u: object) -> None:
    s = str(u)
    assert normalize_nguid(s) == normalize_nguid(s.replace("-", "").upper()) == s.replace("-", "")
    assert normalize_uuid(s.upper()) == s


def test_serial_limits() -> None:
    assert check_serial("A" * 20)
    for bad in ("", "A" * 21, "é", "a\nb"):
        with pytest.raises(BadInput):
            check_serial(bad)


SPEC = ExportSpec(
    nqn=GOOD_NQN,
    serial="S1",
    pool_id="p1",
    vol_id="v1",
    uuid="5b0e6f0a-2c1d-4e8f-9a3b-7c6d5e4f3a21",
    nguid="5b0e6f0a2c1d4e8f9a3b7c6d5e4f3a21",
    listeners=(Listener("tcp", "10.0.0.1"),),
    hosts=(HostAccess(HOST),),
)


def test_good_spec_passes() -> None:
    check_export_spec(SPEC)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"listeners": (Listener("fc", "10.0.0.1"),)}, "trtype"),  # type: ignore[arg-type]
        ({"listeners": (Listener("tcp", "host.example"),)}, "traddr"),
        ({"listeners": (Listener("tcp", "fd00::1"),)}, "traddr"),  # ipv6 address with adrfam ipv4
        ({"listeners": (Listener("tcp", "10.0.0.1", "0"),)}, "trsvcid"),
        ({"hosts": (HostAccess(HOST), HostAccess(HOST))}, "host_nqn"),
        ({"hosts": (HostAccess(HOST, "secret"),)}, "dhchap_key"),
        ({"ana_group": 0}, "ana_group"),
        ({"ana_group": 129}, "ana_group"),
        ({"ana_state": "bogus"}, "ana_state"),
        ({"cntlid_min": 10, "cntlid_max": 5}, "cntlid_min"),
        ({"qos_iops": -1}, "qos_iops"),
        ({"vol_id": "../x"}, "vol_id"),
        ({"nguid": "xyz"}, "nguid"),
    ],
)
def test_bad_spec_names_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(BadInput) as e:
        check_export_spec(dataclasses.replace(SPEC, **change))  # type: ignore[arg-type]
    assert e.value.field == field
