"""What every benchmark shares: its `--no-write` flag, and writing its section of docs/benchmarks.md
(printed always, written unless --no-write), leaving the other sections as they are."""

from __future__ import annotations

import argparse
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def _span(doc: str, section: str) -> tuple[int, int] | None:
    """Where the section headed `section` stands in doc: up to the next "## " heading, or the end."""
    if section not in doc:
        return None
    start = doc.index(section)
    nxt = doc.find("\n## ", start + len(section))
    return start, nxt if nxt >= 0 else len(doc)


def read_section(section: str, path: Path = BENCHMARKS_MD) -> str:
    """The section headed `section` as it stands now ("" when there is none)."""
    doc = path.read_text()
    span = _span(doc, section)
    return doc[span[0] : span[1]] if span else ""


def write_section(path: Path, section: str, text: str) -> None:
    """Replace (or append) the section headed `section` (e.g. "## Cluster (loopback)") with text."""
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    span = _span(old, section)
    path.write_text(old[: span[0]] + text + old[span[1] + 1 :] if span else old.rstrip("\n") + "\n\n" + text)


def add_no_write(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")


def publish(section: str, text: str, *, write: bool) -> None:
    """Print the benchmark's section and, with `write`, put it into docs/benchmarks.md."""
    print(text)
    if write:
        write_section(BENCHMARKS_MD, section, text)
