"""What a soak did, and what it found (pure): counts of every operation and fault by outcome,
the refusals by error code, the violations with the step and what was running, the duration,
and how to replay. Text for a terminal, `to_json()` for `--json`."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

OUTCOMES = ("ok", "refused", "skipped", "failed")


@dataclass(frozen=True)
class Violation:
    """A broken promise: a command past its bound, a verify error, a lost write, a volume not
    healthy after the heal, a leftover. `running` is what was going on (faults, fio, the
    action's own arguments), so the step can be looked at in the journals."""

    step: int
    action: str
    what: str
    running: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "action": self.action, "what": self.what, "running": self.running}


@dataclass
class Report:
    seed: int
    lab: str
    faults: tuple[str, ...]
    hog: bool = False
    started: float = field(default_factory=time.time)
    ended: float | None = None
    steps: int = 0  # planned actions taken (closing ones included)
    last_step: int = 0
    counts: dict[str, Counter[str]] = field(default_factory=dict)  # kind -> outcome -> n
    refusals: Counter[str] = field(default_factory=Counter)  # "kind: code" -> n
    durations: dict[str, list[float]] = field(default_factory=dict)  # kind -> seconds of each
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def count(self, kind: str, outcome: str, seconds: float | None = None) -> None:
        assert outcome in OUTCOMES, outcome
        self.counts.setdefault(kind, Counter())[outcome] += 1
        if seconds is not None:
            self.durations.setdefault(kind, []).append(round(seconds, 1))

    def refuse(self, kind: str, code: str) -> None:
        self.refusals[f"{kind}: {code}"] += 1

    def violate(self, step: int, action: str, what: str, running: str = "") -> None:
        self.violations.append(Violation(step, action, what, running))

    @property
    def duration_s(self) -> float:
        return (self.ended or time.time()) - self.started

    @property
    def ok(self) -> bool:
        return not self.violations

    def replay(self) -> str:
        """The command that replays this run's actions up to where it stopped (or the first
        violation's step)."""
        upto = min((v.step for v in self.violations if v.step > 0), default=self.last_step)
        faults = ",".join(self.faults) or "none"
        # A lab given with --lab is named; the one the soak boots itself is called "soak".
        on = f" --lab {self.lab}" if self.lab != "soak" else ""
        return f"nodeos-lab soak --seed {self.seed} --steps {max(upto, 1)} --faults {faults}{on}"

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "lab": self.lab,
            "faults": list(self.faults),
            "hog": self.hog,
            "ok": self.ok,
            "started": self.started,
            "duration_s": round(self.duration_s, 1),
            "steps": self.steps,
            "last_step": self.last_step,
            "counts": {k: dict(sorted(c.items())) for k, c in sorted(self.counts.items())},
            "refusals": dict(sorted(self.refusals.items())),
            "durations": {k: _stats(v) for k, v in sorted(self.durations.items())},
            "violations": [v.to_json() for v in self.violations],
            "notes": list(self.notes),
            "replay": self.replay(),
        }

    def render(self) -> str:
        lines = [
            f"soak seed {self.seed} on lab {self.lab}: {self.steps} actions in {self.duration_s / 60:.1f} min"
            f" (faults: {', '.join(self.faults) or 'none'}{'; CPU hog beside the lab' if self.hog else ''})",
            f"{'action':<12} {'ok':>5} {'refused':>8} {'skipped':>8} {'failed':>7}   seconds (median/max)",
        ]
        for kind, c in sorted(self.counts.items()):
            st = _stats(self.durations.get(kind, []))
            secs = f"{st['median']:.0f}/{st['max']:.0f}" if st["n"] else "-"
            lines.append(
                f"{kind:<12} {c['ok']:>5} {c['refused']:>8} {c['skipped']:>8} {c['failed']:>7}   {secs}"
            )
        if self.refusals:
            lines.append("refused: " + ", ".join(f"{k} x{n}" for k, n in sorted(self.refusals.items())))
        lines.extend(f"note: {n}" for n in self.notes)
        if self.violations:
            lines.append(f"{len(self.violations)} VIOLATION(S):")
            for v in self.violations:
                lines.append(f"  step {v.step} ({v.action}): {v.what}")
                if v.running:
                    lines.append(f"      while: {v.running}")
            lines.append(f"replay: {self.replay()}")
        else:
            lines.append("no violations")
        return "\n".join(lines)


def _stats(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0, "median": 0.0, "max": 0.0}
    s = sorted(xs)
    return {"n": len(s), "median": s[len(s) // 2], "max": s[-1]}
