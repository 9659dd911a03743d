"""The lab a lab benchmark runs on: the named lab when it is up (left up afterwards), else one
booted for the run and taken down after it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nodeos_devtools.lab import Lab


@contextmanager
def lab_for_run(name: str, **up: Any) -> Iterator[Lab]:
    """`up`: Lab.up's arguments for a lab booted here."""
    lab = Lab(name)
    booted = not lab.is_up()
    if booted:
        lab.up(**up)
    try:
        yield lab
    finally:
        if booted:
            lab.down()
