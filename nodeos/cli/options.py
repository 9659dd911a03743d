"""Option types shared by the console's commands.

`Seconds`: every timeout, wait and interval an operator types. click's FloatRange lets `nan`
through (no comparison with nan is true), and a plain float takes `-1` and `inf`; a command
that then acts before it uses its timeout (create, then wait) would change state on bad input.
A `Seconds` option is checked when the command line is parsed, before anything is sent: a
usage error (exit 2) naming the option and the allowed range.
"""

from __future__ import annotations

import math
from typing import Any

import click

WEEK_S = 7 * 86400.0  # the longest a console waits for anything (a copy of a large published volume)


class Seconds(click.ParamType):
    name = "seconds"

    def __init__(self, maximum: float = WEEK_S, minimum: float | None = None) -> None:
        """A finite number of seconds, above 0 (or at least `minimum`) and at most `maximum`."""
        self.maximum = maximum
        self.minimum = minimum
        low = "more than 0" if minimum is None else f"at least {minimum:g}"
        self.allowed = f"a number of seconds, {low} and at most {maximum:g}"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float) and self._fits(value):
            return value  # a default
        try:
            s = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds; allowed: {self.allowed}", param, ctx)
        if not self._fits(s):
            self.fail(f"{value} is out of range; allowed: {self.allowed}", param, ctx)
        return s

    def _fits(self, s: float) -> bool:
        if not math.isfinite(s) or s > self.maximum:
            return False
        return s > 0 if self.minimum is None else s >= self.minimum

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "SECONDS"
