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
# The whole run (CI's), in two phases, with the simulator tier (CPU only, seeded, no wall-clock
# assertion) beside both at the lowest CPU priority:
#   1. the lab modules that boot one VM of their own (SOLO_LABS) beside the unit, process and
#      netns tiers: one TCG VM takes about one core and leaves the other to those tiers;
#   2. then every other lab module (the shared labs' four VMs need both cores), alone.
# One after the other they took 32.5 min on an idle machine (2026-12-02), of which the solo labs
# 10.2 min and the fast tiers 9 min; in these two phases 25.9 min (docs/benchmarks.md, "CI
# (tests/run.sh)").
# The lab's TCG VMs wait more than they compute; the simulator takes what they leave and never
# what they need. Where the kernel groups tasks by session (sched_autogroup_enabled=1, a common
# default), a nice value only ranks a process against its own session: the tier gets a session
# of its own (setsid), whose group is niced too (/proc/self/autogroup), or it would take a whole
# core from the lab.
SOLO_LABS=(tests/lab/test_update_ab.py tests/lab/test_image_uefi.py)
started=$(date +%s)
logs=$(mktemp -d)
py=(.venv/bin/python -m pytest -p no:cacheprovider --timeout="$TEST_TIMEOUT_S")
# shellcheck disable=SC2016  # expanded by the inner shell
setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null || true; exec nice -n 19 "$@"' sim \
    "${limit[@]}" "${py[@]}" --durations=10 tests/sim >"$logs/sim" 2>&1 &
simpid=$!
trap 'kill -- -"$simpid" 2>/dev/null || kill "$simpid" 2>/dev/null || true; rm -rf "$logs"' EXIT
ignore_solo=()
for m in "${SOLO_LABS[@]}"; do ignore_solo+=("--ignore=$m"); done
set +e
echo "======== phase 1: ${SOLO_LABS[*]} beside the unit, process and netns tiers ========"
"${limit[@]}" "${py[@]}" --durations=10 --ignore=tests/sim --ignore=tests/lab >"$logs/fast" 2>&1 &
fastpid=$!
"${limit[@]}" "${py[@]}" --durations=10 "${SOLO_LABS[@]}" 2>&1 | tee "$logs/solo"
solorc=${PIPESTATUS[0]}
wait "$fastpid"
fastrc=$?
echo
echo "======== phase 1: the unit, process and netns tiers (exit $fastrc) ========"
cat "$logs/fast"
left=$((RUN_LIMIT_S - ($(date +%s) - started)))
[ "$left" -gt 60 ] || left=60
echo
echo "======== phase 2: the other lab modules (exit of phase 1's labs: $solorc) ========"
timeout --signal=INT --kill-after=300 "$left" "${py[@]}" --durations=25 --ignore=tests/sim \
    "${ignore_solo[@]}" tests/lab 2>&1 | tee "$logs/labs"
labrc=${PIPESTATUS[0]}
simrc=0
wait "$simpid" || simrc=$?
set -e
echo
echo "======== the simulator tier (tests/sim, beside the others at nice 19, its own session): exit $simrc ========"
cat "$logs/sim"
# Every part's summary once more, last: a log shown by its head and tail (CI's) keeps where the
# time went and what failed.
for part in solo fast labs; do
    echo
    echo "======== summary: $part ========"
    sed -n '/time by module/,$p' "$logs/$part"
done
echo
echo "tests/run.sh: phase 1 labs exit $solorc, fast tiers exit $fastrc, phase 2 labs exit $labrc," \
    "simulator exit $simrc; whole run $(( ($(date +%s) - started) / 60 )) min"
for rc in "$solorc" "$fastrc" "$labrc" "$simrc"; do
    if [ "$rc" -ne 0 ]; then exit "$rc"; fi
done
