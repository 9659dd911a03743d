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
# Bounds, so that a hang fails with its name and a summary instead of running into CI's own
# limit (90 min), which prints nothing of where the time went: each test (its fixtures included,
# a lab's boot too) at most TEST_TIMEOUT_S; the whole run stopped (SIGINT: pytest then prints
# what ran, what failed and the slowest tests) after RUN_LIMIT_S.
TEST_TIMEOUT_S=${NODEOS_TEST_TIMEOUT_S:-1800}
RUN_LIMIT_S=${NODEOS_RUN_LIMIT_S:-4500}
limit=(timeout --signal=INT --kill-after=300 "$RUN_LIMIT_S")
# The slowest tests at the end of every run: where CI's time goes (docs/benchmarks.md).
if [ $# -gt 0 ]; then
    exec "${limit[@]}" .venv/bin/python -m pytest --timeout="$TEST_TIMEOUT_S" --durations=25 "$@"
fi
# The whole run (CI's): the simulator tier (CPU only, seeded, no wall-clock assertion) runs beside
# the others at the lowest CPU priority. The lab's TCG VMs wait more than they compute (load 1-4
# on 2 cores); the simulator takes what they leave and never what they need (docs/benchmarks.md).
# Where the kernel groups tasks by session (sched_autogroup_enabled=1, a common default), a nice
# value only ranks a process against its own session: the tier gets a session of its own (setsid),
# whose group is niced too (/proc/self/autogroup), or it would take a whole core from the lab.
simlog=$(mktemp)
mainlog=$(mktemp)
# shellcheck disable=SC2016  # expanded by the inner shell
setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null || true; exec nice -n 19 "$@"' sim \
    "${limit[@]}" .venv/bin/python -m pytest -p no:cacheprovider --timeout="$TEST_TIMEOUT_S" --durations=10 \
    tests/sim >"$simlog" 2>&1 &
simpid=$!
trap 'kill -- -"$simpid" 2>/dev/null || kill "$simpid" 2>/dev/null || true; rm -f "$simlog" "$mainlog"' EXIT
set +e
"${limit[@]}" .venv/bin/python -m pytest --timeout="$TEST_TIMEOUT_S" --durations=25 --ignore=tests/sim 2>&1 |
    tee "$mainlog"
rc=${PIPESTATUS[0]}
set -e
simrc=0
wait "$simpid" || simrc=$?
echo
echo "======== the simulator tier (tests/sim, run beside the others at nice 19, its own session): exit $simrc ========"
cat "$simlog"
# The other tiers' summary once more, last: a log shown by its head and tail (CI's) keeps where
# the time went and what failed.
echo
echo "======== the unit, process and lab tiers (exit $rc): their summary again ========"
sed -n '/time by module/,$p' "$mainlog"
if [ "$rc" -ne 0 ]; then exit "$rc"; fi
exit "$simrc"
