"""Verify: read everything back and list where the system differs from the config.

Drift is exactly what a plan would change, plus what cannot be changed here (blockers):
one list, so `verify` and `plan` can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodeos.net.model import NetConfig
from nodeos.net.observe import Observed
from nodeos.net.plan import Plan, make_plan


@dataclass(frozen=True)
class Drift:
    item: str
    expected: Any
    actual: Any
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"item": self.item, "expected": self.expected, "actual": self.actual, "message": self.message}


def drift_from_plan(plan: Plan) -> list[Drift]:
    out = [
        Drift(item=f"{c.target} {c.kind}", expected=c.after, actual=c.before, message=c.describe())
        for c in plan.changes
    ]
    out += [
        Drift(item=b["item"], expected="supported", actual=b["code"], message=b["message"])
        for b in plan.blockers
    ]
    return out


def verify(cfg: NetConfig, obs: Observed) -> tuple[list[Drift], Plan]:
    plan = make_plan(cfg, obs)
    return drift_from_plan(plan), plan
