"""NVMe inventory parsers on outputs captured from nvme-cli 2.13 in the lab (data/)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeos.errors import OperationFailed
from nodeos.hw.nvme import Smart, assess, parse_list, parse_smart

DATA = Path(__file__).parent / "data"


def test_flat_list() -> None:
    drives = parse_list((DATA / "nvme-list-2.13.json").read_text())
    assert [(d.device, d.serial, d.model, d.firmware, d.size_bytes, d.nsid) for d in drives] == [
        ("/dev/nvme0n1", "NODEOS-s1-0", "QEMU NVMe Ctrl", "7.2.22", 536870912, 1),
        ("/dev/nvme1n1", "NODEOS-s1-1", "QEMU NVMe Ctrl", "7.2.22", 536870912, 1),
    ]
    assert [d.controller for d in drives] == ["nvme0", "nvme1"]


def test_verbose_tree_list_has_transport_and_address() -> None:
    drives = parse_list((DATA / "nvme-list-v-2.13.json").read_text())
    assert [(d.device, d.controller, d.serial, d.transport, d.address, d.size_bytes) for d in drives] == [
        ("/dev/nvme0n1", "nvme0", "NODEOS-s1-0", "pcie", "0000:00:04.0", 536870912),
        ("/dev/nvme1n1", "nvme1", "NODEOS-s1-1", "pcie", "0000:00:05.0", 536870912),
    ]


def test_flat_and_tree_agree() -> None:
    flat = parse_list((DATA / "nvme-list-2.13.json").read_text())
    tree = parse_list((DATA / "nvme-list-v-2.13.json").read_text())
    key = [(d.device, d.serial, d.model, d.firmware, d.size_bytes) for d in flat]
    assert key == [(d.device, d.serial, d.model, d.firmware, d.size_bytes) for d in tree]


def test_empty_and_broken_lists() -> None:
    assert parse_list("") == []
    assert parse_list('{"Devices":[]}') == []
    with pytest.raises(OperationFailed):
        parse_list("{not json")


def test_smart_log() -> None:
    s = parse_smart((DATA / "nvme-smart-log-2.13.json").read_text())
    assert s == Smart(
        critical_warning=0,
        percent_used=0,
        media_errors=0,
        temperature_c=50,
        available_spare=0,
        spare_threshold=0,
        power_on_hours=0,
        unsafe_shutdowns=0,
    )
    assert assess(s) == ()


def _smart(**changes: object) -> Smart:
    doc = json.loads((DATA / "nvme-smart-log-2.13.json").read_text())
    doc.update(changes)
    return parse_smart(json.dumps(doc))


def test_failing_drive_reasons() -> None:
    base = _smart()
    assert "critical warning 0x04 (reliability degraded)" in assess(_smart(critical_warning=4))
    assert any("media errors rising (0 -> 3)" in r for r in assess(_smart(media_errors=3), previous=base))
    assert assess(_smart(media_errors=3), previous=_smart(media_errors=3)) == ()  # not rising
    assert any("endurance" in r for r in assess(_smart(percent_used=100)))
    assert any("spare" in r for r in assess(_smart(avail_spare=5, spare_thresh=10)))


def test_defensive_number_shapes() -> None:
    # Other nvme-cli releases print strings with units/commas, or {"value": n}.
    s = _smart(temperature="35 C", media_errors="1,234", critical_warning={"value": 1})
    assert (s.temperature_c, s.media_errors, s.critical_warning) == (35, 1234, 1)


@given(cw=st.integers(0, 255), used=st.integers(0, 255), me=st.integers(0, 10**9), prev=st.integers(0, 10**9))
def test_assess_flags_exactly_the_failing_conditions(cw: int, used: int, me: int, prev: int) -> None:
    s = replace(_BASE, critical_warning=cw, percent_used=used, media_errors=me)
    p = replace(_BASE, media_errors=prev)
    failing = bool(assess(s, p))
    assert failing == (cw != 0 or used >= 100 or me > prev)


_BASE = Smart(critical_warning=0, percent_used=0, media_errors=0, temperature_c=40)
