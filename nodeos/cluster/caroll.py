"""Rotating the cluster CA: what a member does at each step of the roll (pure).

The roll has the steps of the secret's (nodeos/cluster/secretroll.py: stable g -> switch g+1 ->
stable g+1, in the map's `ca` section with the new CA certificate's fingerprint), driven by
the CA's node (nodeos/cluster/carotation.py). A member's side, in files (tlsca.TlsFiles):
staged, it trusts the new CA beside the old (`ca-new.pem`) and holds a new key and a
certificate from the new CA (`node-new.key`, `node-new.pem`); at the switch it presents that
certificate (its identity record says so: `tls_new`); at stable it trusts only the new CA and
its new key and certificate become `node.key` / `node.pem`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MemberCa:
    """What a member holds of a CA roll."""

    gen: int  # the CA generation it trusts alone (0: the CA of `cluster init`)
    new_fp: bytes | None  # fingerprint of the staged new CA certificate, if any
    new_cert_ready: bool  # holds a new key and a certificate of the new CA for it
    presenting_new: bool  # presents that certificate (the switch happened here)


def actions(m: MemberCa, roll: dict[str, Any]) -> tuple[list[str], str | None]:
    """The steps this member takes to match the map's roll, in order, and a problem it cannot fix.

    Steps: `present_new` (present the new certificate), `finish` (trust only the new CA and make
    the new key and certificate its own), `cleanup` (drop a staged copy left after finishing).
    """
    gen, phase = int(roll["gen"]), roll["phase"]
    if gen <= m.gen:
        leftover = gen == m.gen and phase == "stable" and m.new_fp is not None and m.new_fp == roll["fp"]
        return (["cleanup"] if leftover else []), None
    if gen != m.gen + 1 or m.new_fp != roll["fp"]:
        return [], (
            f"the cluster CA was rotated to generation {gen} while this member trusted generation "
            f"{m.gen} only; remove this node and join again with a fresh token"
        )
    steps = []
    if not m.presenting_new:
        if not m.new_cert_ready:
            return [], f"this member holds no certificate of the cluster CA generation {gen}"
        steps.append("present_new")
    if phase == "stable":
        steps.append("finish")
    return steps, None
