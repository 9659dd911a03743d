#!/usr/bin/env bash
# The test command: every tier but hwtests (unit, simulation, process, lab).
# Extra arguments go to pytest, e.g. `bash tests/run.sh -m "not lab"`.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# Tests that read recorded data (Jepsen histories, the SPDK transcript) need ../shared or
# NODEOS_SHARED_DIR; without it they would only skip, so CI refuses to pass silently.
shared=${NODEOS_SHARED_DIR:-$top/../shared}
if [ ! -d "$shared" ] && [ "${NODEOS_SKIP_SHARED:-}" != 1 ]; then
    echo "tests/run.sh: $shared is absent: set NODEOS_SHARED_DIR to the recorded data," \
        "or NODEOS_SKIP_SHARED=1 to run without it (those tests then skip)" >&2
    exit 2
fi
bash "$top/images/bootstrap.sh"
.venv/bin/ruff check nodeos tests bench hwtests
exec .venv/bin/python -m pytest "$@"
