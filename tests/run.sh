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
if [ $# -gt 0 ]; then
    exec .venv/bin/python -m pytest --durations=25 "$@"
fi
# The whole run (CI's): the simulator tier (CPU only, seeded, no wall-clock assertion) runs beside
# the others at the lowest CPU priority. The lab's TCG VMs wait more than they compute (load 1-4
# on 2 cores); the simulator takes what they leave and never what they need (docs/benchmarks.md).
simlog=$(mktemp)
nice -n 19 .venv/bin/python -m pytest -p no:cacheprovider --durations=10 tests/sim >"$simlog" 2>&1 &
simpid=$!
trap 'kill "$simpid" 2>/dev/null || true; rm -f "$simlog"' EXIT
rc=0
.venv/bin/python -m pytest --durations=25 --ignore=tests/sim || rc=$?
simrc=0
wait "$simpid" || simrc=$?
echo
echo "======== the simulator tier (tests/sim, run beside the others at nice 19): exit $simrc ========"
cat "$simlog"
if [ "$rc" -ne 0 ]; then exit "$rc"; fi
exit "$simrc"
