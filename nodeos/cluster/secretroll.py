"""Rotating the cluster secret: the roll's states and transitions (pure).

The secret proves membership in every peer handshake (nodeos/cluster/peerauth.py). Each
secret has a generation (the first is 0); a dialer names the generation it proves, and an
acceptor checks the proof with its secret of that generation, so during a roll peers accept
either. The roll, driven by the leader (nodeos/cluster/rotation.py):

1. stage: the leader makes secret g+1 and hands it to every member (wrapped under the
   current secret, inside the authenticated, encrypted peer link); each keeps it durably as
   *accepted* and still dials with g. One member that does not take it: the leader unstages
   it everywhere and the roll is refused; nothing changed.
2. switch: the map records `{gen: g+1, phase: switch, fp}`; every member, on seeing it, dials
   with g+1 (both still accepted) and says so.
3. stable: once every member dials with g+1 the map records `{gen: g+1, phase: stable}` and
   every member drops g: a peer that knows only the old secret is refused.

The map holds no secret: only its generation and a fingerprint (an HMAC of a fixed label under
the secret: it tells whether two members hold the same secret and reveals nothing of it).
A member's keys live in its 0600 identity record; `reconcile` brings them to what the map
says, so a member killed at any step comes back consistent: it staged durably before the
leader went on, and applying the map again switches or drops what is due.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any

from nodeos.errors import BadInput

PHASES = ("stable", "switch")
FP_BYTES = 16
DEFAULT_TIMEOUT_S = 30.0


def rotate_timeout(params: dict[str, Any]) -> float:
    t = params.get("timeout", DEFAULT_TIMEOUT_S)
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not 1 <= t <= 300:
        raise BadInput("timeout must be a number of seconds from 1 to 300", field="timeout")
    return float(t)


def fingerprint(secret: bytes) -> bytes:
    return hmac.new(secret, b"nodeos cluster secret fingerprint", hashlib.sha256).digest()[:FP_BYTES]


def wrap_key(secret: bytes, gen: int) -> bytes:
    """The key a new secret of generation `gen` travels under: derived from the current one."""
    return hmac.new(secret, b"nodeos secret roll\0" + str(gen).encode(), hashlib.sha256).digest()


def empty_section() -> dict[str, Any]:
    return {"gen": 0, "phase": "stable", "fp": None}


def section(state: dict[str, Any]) -> dict[str, Any]:
    """The map's `secret` section (maps from before rotation have none: generation 0, stable)."""
    return section_of(state, "secret")


def section_of(state: dict[str, Any], name: str) -> dict[str, Any]:
    """A roll's section of the map: `secret`, or `ca` (the same steps, nodeos/cluster/caroll.py)."""
    return dict(state.get(name) or empty_section())


def next_section(cur: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """The map's section after a `secret_roll` command; BadInput (nothing changed) if the step is
    not the next one: stable g -> switch g+1 -> stable g+1, with the same fingerprint."""
    gen, phase, fp = args.get("gen"), args.get("phase"), args.get("fp")
    if type(gen) is not int or gen < 1:
        raise BadInput("gen must be a positive integer", field="gen")
    if phase not in PHASES:
        raise BadInput(f"phase {phase!r} is not a roll phase", field="phase", allowed=list(PHASES))
    if not isinstance(fp, bytes) or len(fp) != FP_BYTES:
        raise BadInput(f"fp must be {FP_BYTES} bytes", field="fp")
    if phase == "switch":
        if cur["phase"] != "stable" or gen != cur["gen"] + 1:
            raise BadInput(
                f"a roll to generation {gen} cannot start: the secret is at generation {cur['gen']} "
                f"({cur['phase']})",
                field="gen",
            )
    elif cur["phase"] != "switch" or gen != cur["gen"] or fp != cur["fp"]:
        raise BadInput(
            f"generation {gen} cannot become the only secret: the roll is at generation {cur['gen']} "
            f"({cur['phase']})",
            field="gen",
        )
    return {"gen": gen, "phase": phase, "fp": fp}


@dataclass(frozen=True)
class MemberKeys:
    """A member's secrets: it dials with `dial_gen` and accepts every generation it holds."""

    dial_gen: int
    secrets: dict[int, bytes] = field(repr=False)

    @property
    def dial(self) -> bytes:
        return self.secrets[self.dial_gen]

    def __repr__(self) -> str:  # never print a secret
        return f"MemberKeys(dial_gen={self.dial_gen}, gens={sorted(self.secrets)})"


def keys_of(identity: dict[str, Any]) -> MemberKeys:
    """The keys in an identity record (one from before rotation holds one secret, generation 0)."""
    gen = int(identity.get("secret_gen", 0))
    held = {int(k): v for k, v in (identity.get("secrets") or {}).items()}
    held[gen] = identity["secret"]
    return MemberKeys(gen, held)


def with_keys(identity: dict[str, Any], keys: MemberKeys) -> dict[str, Any]:
    return {
        **identity,
        "secret": keys.dial,
        "secret_gen": keys.dial_gen,
        "secrets": {str(g): s for g, s in keys.secrets.items()},
    }


def stage(keys: MemberKeys, gen: int, secret: bytes) -> MemberKeys:
    """Accept `secret` as generation `gen` (newer than the one dialled); a re-stage of the same
    generation (a roll that was refused and started again) replaces it."""
    if gen <= keys.dial_gen:
        raise BadInput(f"generation {gen} is not newer than this member's ({keys.dial_gen})", field="gen")
    return MemberKeys(keys.dial_gen, {**keys.secrets, gen: secret})


def unstage(keys: MemberKeys, gen: int) -> MemberKeys:
    if gen <= keys.dial_gen or gen not in keys.secrets:
        return keys
    return MemberKeys(keys.dial_gen, {g: s for g, s in keys.secrets.items() if g != gen})


def reconcile(keys: MemberKeys, roll: dict[str, Any]) -> tuple[MemberKeys, str | None]:
    """This member's keys after the map's roll section: (keys, problem or None).

    An older section (an entry replayed at start) changes nothing. A newer generation this
    member does not hold (or holds with another fingerprint) is a problem it cannot fix: it
    missed the roll and must rejoin with a fresh token.
    """
    gen, phase = int(roll["gen"]), roll["phase"]
    if gen < keys.dial_gen or gen == 0:
        return keys, None
    secret = keys.secrets.get(gen)
    if secret is None or (roll.get("fp") is not None and fingerprint(secret) != roll["fp"]):
        return keys, (
            f"the cluster secret was rotated to generation {gen} while this member held generation "
            f"{keys.dial_gen} only; remove this node and join again with a fresh token"
        )
    if phase == "switch":
        return MemberKeys(gen, keys.secrets), None
    return MemberKeys(gen, {g: s for g, s in keys.secrets.items() if g >= gen}), None
