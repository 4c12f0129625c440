# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/debian13.sh: every part of a run timed, and the times
# printed at the end. Progress goes to stderr, so a step's stdout can be redirected alone.
STEP_TIMES=()

# step NAME CMD...: prints "=== NAME", runs CMD, notes how long it took.
step() {
    local name=$1 start=$SECONDS; shift
    echo "=== $name" >&2
    "$@"
    note_time "$name" $((SECONDS - start))
}

# note_time NAME SECONDS [REMARK]: a step's line among the times step_times prints.
note_time() { STEP_TIMES+=("$(printf '%-48s %5d s%s' "$1" "$2" "${3:+ $3}")"); }

# step_times TITLE: prints TITLE, then each step's time.
step_times() {
    echo "=== $1" >&2
    printf '  %s\n' "${STEP_TIMES[@]}" >&2
}

# What the formatter checks (scripts/test.sh) and writes: every Swift file of the project.
FORMAT_PATHS=(Package.swift Sources Tests bench/ServerLoad fuzz/Harness)

# The test targets, one per kind of test (Package.swift says which is which), run in this order:
# each by its own name, so a new suite runs where its file lives without being listed anywhere.
TEST_TARGETS=(HALTests AgentTests GuidanceServerTests SystemTests)

# swift_tests TARGET [SWIFT TEST OPTIONS...]: one target's tests from the build already made.
# A target that has not ended after TEST_TIMEOUT seconds (1200; SystemTests takes 2.5–4 minutes)
# is stopped (TERM, KILL 30 s later) and the step fails: a test that hangs fails the run instead
# of holding it until CI gives up. Then, or when the target fails, it prints the tests that
# started and never ended, and a minute before the limit the processes still running under it
# (which of this package's programs a hung test is waiting on, with their arguments).
swift_tests() {
    local target=$1 limit=${TEST_TIMEOUT:-1200} log rc=0 watch; shift
    log=$(mktemp)
    (
        trap 'kill $! 2>/dev/null; exit 0' TERM
        sleep "$((limit > 120 ? limit - 60 : limit / 2))" & wait $!
        echo "=== $target still running; its processes:" >&2
        ps -e --forest -o pid=,etimes=,args= | awk '/ timeout -k / {on=1} on && !/ awk | cut -c/' | cut -c1-300 >&2
    ) &
    watch=$!
    # The status is swift test's (timeout's 124 when stopped), whatever pipefail says.
    timeout -k 30 "$limit" swift test --skip-build "$@" --filter "^$target\." 2>&1 | tee "$log" && rc=${PIPESTATUS[0]} || rc=${PIPESTATUS[0]}
    kill "$watch" 2>/dev/null || true
    wait "$watch" 2>/dev/null || true
    if [ "$rc" != 0 ]; then
        [ "$rc" != 124 ] || echo "=== $target: stopped after $limit s" >&2
        echo "=== $target: tests started and not ended:" >&2
        python3 - "$log" >&2 <<'PY'
import re, sys
started, ended = [], set()
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    m = re.search(r"Test (\S+?\(.*?\))(?: with \d+ test cases?)? (started|passed|failed|skipped)", line)
    if m:
        (started.append if m.group(2) == "started" else ended.add)(m.group(1))
print("\n".join("  " + name for name in started if name not in ended) or "  none")
PY
    fi
    rm -f "$log"
    return "$rc"
}

# Every build of the test command takes the versions in the committed Package.resolved and fails
# if it is out of date (after a change to Package.swift's dependencies: `swift package resolve`,
# then commit the file), so every clone builds the same code.
RESOLVED_FLAGS=(--force-resolved-versions)

# The test command's debug build carries no DWARF: it builds and links about a quarter faster on
# two cores. Failed expectations name their source line anyway (#expect records it), and a crash's
# backtrace keeps the function names. A build for debugging is plain `swift build`. (The index
# store stays: SwiftPM finds the tests on Linux by reading it.)
DEBUG_BUILD_FLAGS=("${RESOLVED_FLAGS[@]}" -debug-info-format none)

# side_by_side LOGDIR NAME CMD [NAME CMD ...]: steps that run at once, each CMD (one word: a
# function or a program) in the background with its output in LOGDIR/<n>.log. When all have
# ended, each log is printed whole, in the order given, and each step's time noted as its own.
# Fails when any failed; all are waited for first.
side_by_side() {
    local dir=$1 start=$SECONDS i n=0 ended rc failed=0; shift
    local -a names=() pids=() took=() codes=()
    mkdir -p "$dir"
    while [ $# -ge 2 ]; do
        names+=("$1")
        echo "=== $1 (side by side; its output follows when all have ended: $dir/$n.log)" >&2
        "$2" > "$dir/$n.log" 2>&1 < /dev/null &
        pids+=($!)
        n=$((n + 1))
        shift 2
    done
    local -a running=("${pids[@]}")
    while [ "${#running[@]}" -gt 0 ]; do
        rc=0
        wait -n -p ended "${running[@]}" || rc=$?
        for i in "${!pids[@]}"; do
            [ "${pids[$i]}" != "$ended" ] || { took[i]=$((SECONDS - start)); codes[i]=$rc; }
        done
        running=()
        for i in "${!pids[@]}"; do [ -n "${codes[$i]:-}" ] || running+=("${pids[$i]}"); done
    done
    for i in "${!names[@]}"; do
        echo "=== ${names[$i]}: ended after ${took[$i]} s (exit ${codes[$i]}); its output:" >&2
        cat "$dir/$i.log" >&2
        note_time "${names[$i]}" "${took[$i]}" "(side by side)"
        [ "${codes[$i]}" = 0 ] || failed=1
    done
    return "$failed"
}
