"""Parameter names each SPDK RPC method takes, read from the installed `spdk` package's CLI
(spdk/cli/*.py): keywords of `args.client.<method>(...)`, the method's argparse options,
and the names that `group_as(params, '<name>', [...])` nests options under.

Used only for methods the recorded transcript lacks: a check of names, not a replay.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path


def _calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


@cache
def cli_params() -> dict[str, set[str]]:
    import spdk.cli

    out: dict[str, set[str]] = {}
    for path in sorted(Path(spdk.cli.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            # Inner handler functions: def <method>(args): ... args.client.<method>(kw=...)
            for call in _calls(fn):
                f = call.func
                if (
                    isinstance(f, ast.Attribute)
                    and isinstance(f.value, ast.Attribute)
                    and f.value.attr == "client"
                ):
                    names = out.setdefault(f.attr, set())
                    names.update(k.arg for k in call.keywords if k.arg)
                    for g in _calls(fn) if fn.name == f.attr else []:
                        is_group = isinstance(g.func, ast.Name) and g.func.id == "group_as"
                        if is_group and len(g.args) >= 2 and isinstance(g.args[1], ast.Constant):
                            names.add(str(g.args[1].value))
            # Parser setup in statement order: add_parser('<method>') then p.add_argument(...)
            current: str | None = None
            for stmt in fn.body:
                for call in _calls(stmt):
                    f = call.func
                    if not isinstance(f, ast.Attribute):
                        continue
                    if f.attr == "add_parser" and call.args and isinstance(call.args[0], ast.Constant):
                        current = str(call.args[0].value)
                        out.setdefault(current, set())
                    elif f.attr == "add_argument" and current:
                        opts = [
                            a.value
                            for a in call.args
                            if isinstance(a, ast.Constant) and isinstance(a.value, str)
                        ]
                        longs = [o for o in opts if o.startswith("--")] or [
                            o for o in opts if not o.startswith("-")
                        ]
                        dest = next(
                            (
                                k.value.value
                                for k in call.keywords
                                if k.arg == "dest" and isinstance(k.value, ast.Constant)
                            ),
                            None,
                        )
                        if dest or longs:
                            out[current].add(str(dest or longs[0].lstrip("-").replace("-", "_")))
    return out
