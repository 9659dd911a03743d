"""Shared CLI plumbing: the --json option, result printing and exit codes.

Every command takes `--json`. Success prints the result (JSON on stdout, or a human
rendering) and exits 0. A NodeosError prints its message (with the field at fault)
and exits with the error's code: 2 for bad input, 1 for a failed operation.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from nodeos.cli.render import error_text, json_text
from nodeos.errors import EXIT_BAD_INPUT, BadInput, NodeosError

F = TypeVar("F", bound=Callable[..., Any])


def json_option(fn: F) -> F:
    """Add `--json` to a command; the flag reaches the command as `as_json`."""
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(fn)


def print_json(data: Any) -> None:
    click.echo(json_text(data))


def fail(err: NodeosError, as_json: bool) -> None:
    """Report an error and exit with its code."""
    if as_json:
        print_json({"error": err.to_dict()})
    else:
        click.echo(error_text(err), err=True)
    sys.exit(err.exit_code)


def command_runner(fn: F) -> F:
    """Wrap a click callback so NodeosError and click usage errors give clean exits.

    The callback returns `(data, human)`: `data` is printed with --json, `human`
    (a string, or a callable taking data and returning a string) otherwise.
    Returning None prints nothing.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json", False))
        try:
            out = fn(*args, **kwargs)
        except NodeosError as err:
            fail(err, as_json)
            return None
        if out is None:
            return None
        data, human = out
        if as_json:
            print_json(data)
        else:
            text = human(data) if callable(human) else human
            if text:
                click.echo(text)
        return None

    return wrapper  # type: ignore[return-value]


def bad_input(message: str, field: str, allowed: Any = None) -> BadInput:
    return BadInput(message, field=field, allowed=allowed)


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """Render rows as a plain aligned text table (for human output)."""
    if not rows:
        return "(none)"
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


__all__ = ["EXIT_BAD_INPUT", "command_runner", "fail", "json_option", "print_json", "table"]
