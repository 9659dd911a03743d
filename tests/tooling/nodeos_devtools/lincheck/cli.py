"""`nodeos-lincheck --model register|kv FILE`: prints the verdict.

Exit codes: 0 linearizable, 1 not-linearizable, 2 malformed input (the line is named),
3 a key's search used its budget (--timeout, --max-states) and no key was found
not linearizable (printed as `unknown`).
"""

from __future__ import annotations

import json
import sys

import click

from nodeos.errors import EXIT_BAD_INPUT, BadInput
from nodeos_devtools.lincheck import MODELS, NOT_LINEARIZABLE, UNKNOWN_VERDICT, check_text
from nodeos_devtools.lincheck.checker import DEFAULT_MAX_STATES

EXIT_UNKNOWN = 3


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model", "model", required=True, type=click.Choice(sorted(MODELS)), help="Sequential model.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Each key's search budget in seconds; a key over it is 'unknown' (exit 3 if no key fails).",
)
@click.option(
    "--max-states",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_STATES,
    show_default=True,
    help="Each key's budget of cached search states (bounds memory, ~60 bytes each).",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.argument("path", type=click.Path(dir_okay=False, allow_dash=True))
def cli(model: str, timeout: float | None, max_states: int, as_json: bool, path: str) -> None:
    """Check that the history in PATH is linearizable under MODEL."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        click.echo(f"error: cannot read {path}: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    try:
        result = check_text(model, text, timeout=timeout, max_states=max_states)
    except BadInput as err:
        if as_json:
            click.echo(json.dumps({"error": err.to_dict()}))
        else:
            click.echo(f"error: {path}: {err.message}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "verdict": result.verdict,
                    "operations": result.ops,
                    "partitions": result.partitions,
                    "detail": result.detail,
                }
            )
        )
    else:
        click.echo(result.verdict)
        if result.detail:
            click.echo(result.detail, err=True)
    if result.verdict == NOT_LINEARIZABLE:
        sys.exit(1)
    if result.verdict == UNKNOWN_VERDICT:
        sys.exit(EXIT_UNKNOWN)


def main() -> None:
    cli(standalone_mode=True)


if __name__ == "__main__":
    main()
