"""The `nodeos cluster ... --json` console against a LocalNode, for the process tests of the
cluster's membership, join tokens and peer port."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nodeos.cluster.localcluster import LocalNode

NODEOS = str(Path(sys.executable).parent / "nodeos")


def cli(node: LocalNode, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NODEOS, "--socket", node.socket, "cluster", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
    )


def ok(r: subprocess.CompletedProcess[str]) -> Any:
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return json.loads(r.stdout)


def started_nodes(tmp_path: Path) -> Iterator[Callable[[int], LocalNode]]:
    """The body of a `nodes` fixture: `nodes(i)` starts node i; all are killed at the end."""
    made: list[LocalNode] = []

    def make(i: int) -> LocalNode:
        n = LocalNode(tmp_path, i)
        n.start()
        made.append(n)
        return n

    yield make
    for n in made:
        n.kill()
