#!/usr/bin/env bash
# Runs inside the VM (started by run.sh): loads the kernel pieces, then runs every cases/*.sh in
# order. Each case is its own script (exit 0 = pass) and logs to $HIL_WORK/cases/<case>/case.log.
# Results go to $HIL_WORK/results.tsv (case<TAB>PASS|FAIL<TAB>seconds), which run.sh reads.
#
# Environment (set by run.sh): HIL_WORK (writable, shared with the host), AGENT_BIN.
# Optional: HIL_CASES (space-separated case names or globs to run, default all),
#           HIL_CASE_TIMEOUT (seconds per case, default 240; a case's "# hil-case-timeout: N" line wins),
#           HIL_MODULES (kernel pieces to load, default "vivid gpio-sim snd-aloop lis3dh").
set -uo pipefail

HIL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export HIL_DIR
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HIL_DIR/lib.sh"

: "${HIL_WORK:?HIL_WORK must be set (run.sh sets it)}"
: "${AGENT_BIN:?AGENT_BIN must be set (run.sh sets it)}"
export HIL_WORK AGENT_BIN
HIL_MODULES="${HIL_MODULES:-vivid gpio-sim snd-aloop lis3dh}"
HIL_CASE_TIMEOUT="${HIL_CASE_TIMEOUT:-240}"
RESULTS="$HIL_WORK/results.tsv"
: > "$RESULTS"

hil_log "in VM: kernel $(uname -r), $(nproc) cpus, $(awk '/MemTotal/ {print int($2/1024)" MiB"}' /proc/meminfo)"

# Kernel pieces, once per boot. A piece that fails to load fails every case (they'd be meaningless).
setup_ok=1
for m in $HIL_MODULES; do
    fn="hil_load_${m//-/_}"
    if ! declare -F "$fn" >/dev/null; then
        hil_log "setup: no loader $fn in lib.sh"; setup_ok=0; continue
    fi
    if "$fn" > "$HIL_WORK/setup-$m.log" 2>&1; then
        hil_log "setup: $m loaded"
    else
        hil_log "setup: loading $m FAILED:"; sed 's/^/    /' "$HIL_WORK/setup-$m.log"; setup_ok=0
    fi
done
{ lsmod; echo; ls -l /dev/video* /dev/gpiochip* /dev/snd/ 2>&1; echo; gpiodetect; echo; aplay -l; arecord -l; } \
    > "$HIL_WORK/setup-state.log" 2>&1

selected() {
    [ -z "${HIL_CASES:-}" ] && return 0
    local pat
    for pat in $HIL_CASES; do
        # shellcheck disable=SC2053
        [[ $1 == $pat || $1 == $pat.sh ]] && return 0
    done
    return 1
}

for case_script in "$HIL_DIR"/cases/*.sh; do
    [ -e "$case_script" ] || continue
    name=$(basename "$case_script" .sh)
    selected "$name" || continue
    case_dir="$HIL_WORK/cases/$name"
    mkdir -p "$case_dir"
    start=$EPOCHREALTIME
    if [ "$setup_ok" -ne 1 ]; then
        echo "setup failed; not run" > "$case_dir/case.log"
        rc=99
    else
        # A case may ask for longer than the default: a line "# hil-case-timeout: SECONDS".
        case_timeout=$(sed -n 's/^# hil-case-timeout: *\([0-9][0-9]*\)$/\1/p' "$case_script" | head -1)
        case_timeout=${case_timeout:-$HIL_CASE_TIMEOUT}
        hil_log "case $name: running"
        CASE_DIR="$case_dir" timeout -k 10 "$case_timeout" bash "$case_script" > "$case_dir/case.log" 2>&1 < /dev/null
        rc=$?
        [ "$rc" -eq 124 ] && echo "case timed out after ${case_timeout}s" >> "$case_dir/case.log"
    fi
    secs=$(hil_since "$start")
    if [ "$rc" -eq 0 ]; then verdict=PASS; else verdict=FAIL; fi
    printf '%s\t%s\t%s\n' "$name" "$verdict" "$secs" >> "$RESULTS"
    hil_log "case $name: $verdict (${secs}s, exit $rc)"
    if [ "$verdict" = FAIL ]; then
        grep -E 'FAIL|timed out|not run' "$case_dir/case.log" | head -20 | sed 's/^/    /'
    fi
    sync
done
hil_log "in VM: done"
