"""Small readers of kernel facts shared by the inventory and the kernel data plane."""

from __future__ import annotations

from pathlib import Path


def read_attr(p: Path, default: str = "") -> str:
    """A sysfs attribute, stripped; `default` when missing or unreadable (a device going away)."""
    try:
        return p.read_text().strip()
    except OSError:
        return default


def uuid_digits(u: str) -> str:
    """md prints uuids as 8:8:8:8 hex, others with dashes: compare the hex digits only."""
    return u.replace(":", "").replace("-", "").lower()
