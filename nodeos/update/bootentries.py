"""Slots as systemd-boot sees them: one loader entry per slot on the ESP, with boot counting in
the file name (the Boot Loader Specification's `+LEFT[-DONE]`). Pure: names and contents in,
names and contents out; nodeos/update/backend.py applies them to the ESP for RAUC.

- `nodeos-b+1.conf`: written by an update, one try left: systemd-boot boots it first (highest
  `version`) and renames it `nodeos-b+0-1.conf` as it does;
- `nodeos-b.conf` (no counter): good; systemd-bless-boot removes the counter once
  boot-complete.target is reached (after nodeos-health-gate.service);
- `nodeos-b+0-1.conf`: no tries left: bad. systemd-boot sorts it behind every other entry, so
  the old slot's entry boots: the firmware's own return to the old slot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from nodeos.update import layout

_NAME = re.compile(r"^nodeos-([a-z])(?:\+(\d+)(?:-(\d+))?)?\.conf$")
_VERSION = re.compile(r"^version\s+(\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Entry:
    filename: str
    slot: str
    left: int | None  # tries left; None: no counter (good)
    done: int | None
    generation: int

    @property
    def state(self) -> str:
        if self.left is None:
            return "good"
        return "bad" if self.left == 0 else "trying"


def parse(filename: str, content: str) -> Entry | None:
    """An entry of ours from its file name and content; None for any other file."""
    m = _NAME.match(filename)
    if not m or m.group(1) not in layout.SLOTS:
        return None
    v = _VERSION.search(content)
    left = int(m.group(2)) if m.group(2) is not None else None
    done = int(m.group(3)) if m.group(3) is not None else (0 if left is not None else None)
    return Entry(filename, m.group(1), left, done, int(v.group(1)) if v else 0)


def filename(slot: str, left: int | None = None, done: int = 0) -> str:
    if left is None:
        return f"{layout.ENTRY_PREFIX}{slot}.conf"
    return f"{layout.ENTRY_PREFIX}{slot}+{left}" + (f"-{done}" if done else "") + ".conf"


def boot_order(entries: Iterable[Entry]) -> list[Entry]:
    """The order systemd-boot puts our entries in (one sort-key): entries with tries left or no
    counter before those whose tries ran out, then the highest version first."""
    return sorted(entries, key=lambda e: (e.state == "bad", -e.generation, e.filename))


def by_slot(entries: Iterable[Entry], slot: str) -> list[Entry]:
    return [e for e in entries if e.slot == slot]


def primary(entries: Iterable[Entry]) -> Entry | None:
    """The entry that boots next (None: every entry is bad, or there is none)."""
    order = boot_order(entries)
    return order[0] if order and order[0].state != "bad" else None


def slot_state(entries: Iterable[Entry], slot: str, booted: str | None = None) -> str:
    """good / bad / trying of a slot; a slot without an entry cannot boot: bad. The slot running
    now from an entry that still has a counter (`+0-1`: this boot is its last try) is trying:
    its health gate has not passed yet."""
    mine = boot_order(by_slot(entries, slot))
    if not mine:
        return "bad"
    if slot == booted and mine[0].left is not None:
        return "trying"
    return mine[0].state


@dataclass(frozen=True)
class Plan:
    write: str  # the entry file to write (name)
    content: str
    remove: tuple[str, ...]  # the slot's other entry files


def activate(entries: list[Entry], slot: str, *, booted: str | None, tries: int = layout.BOOT_TRIES) -> Plan:
    """Make `slot` the one that boots next: a generation above every entry; a boot counter when
    it is not the slot running now (it must prove itself); the booted slot (RAUC's mark-active
    of the running slot) gets none."""
    gen = max((e.generation for e in entries), default=0) + 1
    name = filename(slot) if slot == booted else filename(slot, tries)
    old = tuple(e.filename for e in by_slot(entries, slot) if e.filename != name)
    return Plan(name, layout.loader_entry(slot, gen), old)


def mark(entries: list[Entry], slot: str, good: bool) -> tuple[str, str] | None:
    """(old name, new name) marking `slot` good (counter removed) or bad (no tries left); None
    when it already is, or has no entry."""
    mine = boot_order(by_slot(entries, slot))
    if not mine:
        return None
    e = mine[0]
    new = filename(slot) if good else filename(slot, 0, max(e.done or 0, 1))
    if (good and e.state == "good") or (not good and e.state == "bad"):
        return None
    return (e.filename, new)
