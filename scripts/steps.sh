# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/debian13.sh: every part of a run timed, and the times
# printed at the end. Progress goes to stderr, so a step's stdout can be redirected alone.
STEP_TIMES=()

# step NAME CMD...: prints "=== NAME", runs CMD, notes how long it took.
step() {
    local name=$1 start=$SECONDS; shift
    echo "=== $name" >&2
    "$@"
    STEP_TIMES+=("$(printf '%-44s %5d s' "$name" $((SECONDS - start)))")
}

# step_times TITLE: prints TITLE, then each step's time.
step_times() {
    echo "=== $1" >&2
    printf '  %s\n' "${STEP_TIMES[@]}" >&2
}
