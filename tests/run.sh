#!/usr/bin/env bash
# The test command: every tier but hwtests (unit, simulation, process, lab).
# Extra arguments go to pytest, e.g. `bash tests/run.sh -m "not lab"`.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bash "$top/images/bootstrap.sh"
cd "$top"
.venv/bin/ruff check nodeos tests bench hwtests
exec .venv/bin/python -m pytest "$@"
