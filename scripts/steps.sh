# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/debian13.sh: every part of a run timed, and the times
# printed at the end. Progress goes to stderr, so a step's stdout can be redirected alone.
STEP_TIMES=()

# step NAME CMD...: prints "=== NAME", runs CMD, notes how long it took.
step() {
    local name=$1 start=$SECONDS; shift
    echo "=== $name" >&2
    "$@"
    STEP_TIMES+=("$(printf '%-48s %5d s' "$name" $((SECONDS - start)))")
}

# step_times TITLE: prints TITLE, then each step's time.
step_times() {
    echo "=== $1" >&2
    printf '  %s\n' "${STEP_TIMES[@]}" >&2
}

# The test targets, one per kind of test (Package.swift says which is which), run in this order:
# each by its own name, so a new suite runs where its file lives without being listed anywhere.
TEST_TARGETS=(HALTests AgentTests GuidanceServerTests SystemTests)

# swift_tests TARGET [SWIFT TEST OPTIONS...]: one target's tests from the build already made.
# A target that has not ended after TEST_TIMEOUT seconds (1200; SystemTests takes 2.5–3 minutes)
# is stopped (TERM, KILL 30 s later) and the step fails: a test that hangs fails the run instead
# of holding it until CI gives up.
swift_tests() {
    local target=$1; shift
    timeout -k 30 "${TEST_TIMEOUT:-1200}" swift test --skip-build "$@" --filter "^$target\."
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
