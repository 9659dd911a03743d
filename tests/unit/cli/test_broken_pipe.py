"""A reader that goes away (`nodeos cluster status --json | head -1`): the console exits 1
without a traceback, on its fast path (no click) as through click. No daemon: the fast path's
JSON error goes to stdout too, into the same closed pipe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

NODEOS = str(Path(sys.executable).parent / "nodeos")
NO_DAEMON = {"NODEOS_SOCKET": "/nonexistent/nodeos-test/api.sock"}


@pytest.mark.parametrize("argv", [["status", "--json"], ["pool", "list", "--json"], ["--help"]])
def test_a_closed_stdout_is_no_traceback(argv: list[str]) -> None:
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the console writes
    try:
        p = subprocess.run(
            [NODEOS, *argv],
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={**os.environ, **NO_DAEMON},
        )
    finally:
        os.close(w)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
