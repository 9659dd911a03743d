#!/usr/bin/env bash
# The test command: every tier but hwtests (unit, simulation, process, lab).
# Extra arguments go to pytest, e.g. `bash tests/run.sh -m "not lab"`.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# Tests that read recorded data (Jepsen histories, the SPDK transcript) need ../shared or
# NODEOS_SHARED_DIR. Without it they skip, each with its reason, and the run says so loudly at
# the start and in the summary (counted by reason): never silently.
shared=${NODEOS_SHARED_DIR:-$top/../shared}
if [ ! -d "$shared" ]; then
    echo "tests/run.sh: WARNING: $shared is absent: the tests that read the recorded data will" \
        "SKIP (set NODEOS_SHARED_DIR to run them)" >&2
fi
bash "$top/images/bootstrap.sh"
.venv/bin/ruff check nodeos tests bench hwtests
# The slowest tests at the end of every run: where CI's time goes (docs/benchmarks.md).
exec .venv/bin/python -m pytest --durations=25 "$@"
