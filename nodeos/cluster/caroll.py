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


STALE_STAGE_S = 60.0  # a staged CA older than this, never switched to, is a dead roller's leftover


def stage_refusal(
    staged_fp: bytes | None,
    staged_by: int | None,
    staged_age_s: float,
    new_fp: bytes,
    frm: int,
    members: set[int],
) -> str | None:
    """Why a member refuses to stage the new CA `new_fp` of a roll driven by node `frm` while it
    holds another CA staged (by `staged_by`, `staged_age_s` ago); None: it stages it.

    Any member may drive a roll; two at once must not mix. A staged CA is replaced only by the
    same roller, when its roller is no longer a member, or once it is stale."""
    if staged_fp is None or staged_fp == new_fp or staged_by == frm:
        return None
    if staged_by is not None and staged_by not in members:
        return None
    if staged_age_s >= STALE_STAGE_S:
        return None
    who = f"node {staged_by}" if staged_by is not None else "another member"
    return (
        f"a rotation of the cluster CA driven by {who} is under way (staged {staged_age_s:.0f} s ago); "
        "try again once it is done"
    )


def holder_warning(holder: int | None, members: set[int], down: bool) -> str | None:
    """What `cluster status` says when the member holding the cluster CA cannot sign joins."""
    if holder is None:
        return None
    if holder not in members:
        return (
            f"node {holder}, which held the cluster CA, is no longer a member: no node can join; run "
            "`nodeos cluster rotate-ca` on any member to make a new CA there"
        )
    if down:
        return (
            f"node {holder}, which holds the cluster CA, is down: no node can join until it is back; "
            f"if it is lost for good, run `nodeos cluster remove {holder}` on another member (the CA "
            "then moves to that member)"
        )
    return None
