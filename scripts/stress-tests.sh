#!/usr/bin/env bash
# The Swift test targets, run again and again with two CPU hogs beside them: proof that no test
# depends on the machine's pace. Not part of the test command (it takes a while); its result goes
# into BENCHMARKS.md ("Tests under load").
#
#     bash scripts/stress-tests.sh            5 runs of every target
#     RUNS=10 bash scripts/stress-tests.sh    10 runs
#     HOGS=4 bash scripts/stress-tests.sh     four hogs instead of two
#
# The hogs are `stress-ng --cpu N` (Debian's stress-ng) at normal priority, as busy as the tests
# themselves: on a 2-core machine the tests get about half of it. Each run's output is kept in
# .build-stress/run-N-TARGET.log; a failed test is listed by name at the end. Exits non-zero if
# any run failed. Needs what the test command needs (root for the system tests' namespaces).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=steps.sh
source scripts/steps.sh

RUNS=${RUNS:-5}
HOGS=${HOGS:-2}
OUT=.build-stress
mkdir -p "$OUT"

bash scripts/install-deps.sh
if ! command -v stress-ng >/dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends stress-ng
fi
step "build" swift build --build-tests "${DEBUG_BUILD_FLAGS[@]}"

stress-ng --cpu "$HOGS" --timeout 0 --quiet &
HOG=$!
trap 'kill "$HOG" 2>/dev/null || true; wait "$HOG" 2>/dev/null || true' EXIT
echo "=== $HOGS CPU hogs (stress-ng pid $HOG) beside $RUNS runs of ${TEST_TARGETS[*]}" >&2

failed_runs=0
declare -a summary=()
for run in $(seq 1 "$RUNS"); do
    run_failures=0
    run_tests=0
    start=$SECONDS
    for target in "${TEST_TARGETS[@]}"; do
        log="$OUT/run-$run-$target.log"
        swift_tests "$target" > "$log" 2>&1 && status=0 || status=$?
        # Swift Testing's closing line: "Test run with N tests in M suites passed|failed ...".
        tests=$(grep -oE 'Test run with [0-9]+ tests?' "$log" | tail -1 | grep -oE '[0-9]+' || echo 0)
        failures=$(grep -cE '✘ Test .*(failed|recorded an issue)' "$log" || true)
        if [ "$status" -ne 0 ] && [ "$failures" -eq 0 ]; then failures=1; fi   # a crash: no line per test
        run_tests=$((run_tests + tests))
        run_failures=$((run_failures + failures))
        if [ "$failures" -ne 0 ]; then
            echo "run $run, $target: $failures failure(s), exit $status ($log):" >&2
            grep -E '✘ Test .*(failed|recorded an issue)' "$log" | sed 's/^/    /' >&2 || tail -20 "$log" >&2
        fi
    done
    [ "$run_failures" -eq 0 ] || failed_runs=$((failed_runs + 1))
    summary+=("$(printf 'run %d: %d tests, %d failed, %d s' "$run" "$run_tests" "$run_failures" $((SECONDS - start)))")
    echo "=== ${summary[-1]}" >&2
done

echo "=== $RUNS runs with $HOGS CPU hogs on $(nproc) cores: $((RUNS - failed_runs)) without a failure" >&2
printf '  %s\n' "${summary[@]}" >&2
echo "$((RUNS - failed_runs)) passed, $failed_runs failed"
[ "$failed_runs" -eq 0 ]
