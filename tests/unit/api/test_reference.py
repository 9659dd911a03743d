"""docs/api.md is made from the definitions and kept current; every method has its entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeos.api import reference
from nodeos.api.registry import METHODS


def test_the_committed_api_reference_is_current() -> None:
    assert reference.DOC.read_text() == reference.render(), "run: python -m nodeos.api.reference"


def test_every_method_has_its_entry_once() -> None:
    text = reference.DOC.read_text()
    for name in METHODS:
        assert text.count(f"### `{name}`\n") == 1, name


def test_a_field_says_its_type_bounds_and_validator() -> None:
    text = reference.render()
    assert "| `replicas` | integer (>= 1, <= 3) | no |" in text
    assert "one of `node`, `rack`, `switch`" in text
    assert "(checked by `nodeos.validate:name`)" in text
    assert "9.22" not in text  # whole bounds print whole


def test_check_mode_says_when_the_file_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reference, "DOC", tmp_path / "api.md")
    assert reference.main(["--check"]) == 1
    assert reference.main([]) == 0
    assert reference.main(["--check"]) == 0
