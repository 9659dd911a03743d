"""Shared test setup. Tier-specific fixtures live in tests/<tier>/conftest.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
SHARED = PROJECT.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """../shared/, read in place; tests that need it skip with a reason where it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent: the design notes and recorded data are not here")
    return SHARED


def is_root() -> bool:
    return os.geteuid() == 0
