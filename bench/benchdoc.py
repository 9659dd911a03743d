"""Writes one benchmark's section of docs/benchmarks.md, leaving the other sections as they are."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, section: str, text: str) -> None:
    """Replace (or append) the section headed `section` (e.g. "## Cluster (loopback)") with text."""
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    if section in old:
        start = old.index(section)
        nxt = old.find("\n## ", start + len(section))
        new = old[:start] + text + (old[nxt + 1 :] if nxt >= 0 else "")
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.write_text(new)
