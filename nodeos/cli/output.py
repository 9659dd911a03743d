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


def usage_error(exc: click.UsageError) -> BadInput:
    """A click usage error (unknown option or command, a value its type refuses, a missing
    option) as the console's bad input, naming the field and what is allowed where click knows."""
    field: str | None = "arguments"
    allowed: Any = None
    ctx = exc.ctx
    if isinstance(exc, click.BadParameter):
        param = exc.param
        field = _field_of(param) if param is not None else (str(exc.param_hint or "") or field)
        allowed = _allowed_values(param.type) if param is not None else None
    elif isinstance(exc, click.NoSuchOption):
        field = exc.option_name
        if ctx is not None:
            allowed = sorted(o for p in ctx.command.get_params(ctx) for o in [*p.opts, *p.secondary_opts])
            allowed = [o for o in allowed if o.startswith("-")]
    elif isinstance(exc, click.BadOptionUsage):
        field = exc.option_name
    elif isinstance(ctx and ctx.command, click.Group) and "No such command" in exc.message:
        # click < 8.2 has no NoSuchCommand class: the message is what the versions share
        assert ctx is not None and isinstance(ctx.command, click.Group)
        field = "command"
        allowed = sorted(ctx.command.list_commands(ctx))
    return BadInput(exc.format_message(), field=field, allowed=allowed)


def _field_of(param: click.Parameter) -> str | None:
    """An option by the name an operator types (`--node-id` -> node_id), an argument by its own."""
    longest = max((o for o in param.opts if o.startswith("--")), key=len, default=None)
    return longest[2:].replace("-", "_") if longest else param.name


def _allowed_values(t: click.ParamType) -> Any:
    if isinstance(t, click.Choice):
        return [str(c) for c in t.choices]
    if hasattr(t, "allowed"):  # nodeos.cli.options.Seconds
        return t.allowed
    if isinstance(t, (click.IntRange, click.FloatRange)):
        return t._describe_range()
    return {"integer": "an integer", "float": "a number", "boolean": "true or false"}.get(t.name)


class JsonUsageError(click.ClickException):
    """A usage error of a command line carrying --json: shown as the console's JSON error object
    on stdout (a script reads every error the same way), exit 2 as click's own."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, exc: click.UsageError) -> None:
        super().__init__(exc.format_message())
        self.err = usage_error(exc)

    def show(self, file: Any = None) -> None:
        print_json({"error": self.err.to_dict()})


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


__all__ = [
    "EXIT_BAD_INPUT",
    "JsonUsageError",
    "command_runner",
    "fail",
    "json_option",
    "print_json",
    "table",
    "usage_error",
]
