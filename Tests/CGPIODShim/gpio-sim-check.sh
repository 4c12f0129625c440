#!/usr/bin/env bash
# Drives a simulated GPIO chip (gpio-sim) through shim_check, i.e. the CGPIOD target's C:
# chip name, label and lines; a line found by name; request, set, active-low, release; busy
# (EBUSY, and the holder the kernel names); an offset past the last line; permission denied.
# Needs root and a kernel that can load gpio-sim, i.e. the HIL VM (Tests/HIL/README.md), never
# the host. Ends with "N passed, N failed".
#
#     bash Tests/CGPIODShim/gpio-sim-check.sh SHIM_CHECK [GPIO_SIM_KO]
#
# SHIM_CHECK: a binary built by run.sh. GPIO_SIM_KO: an out-of-tree gpio-sim module, loaded with
# insmod when gpio-sim is neither loaded nor available to modprobe.
set -uo pipefail

bin="${1:?usage: gpio-sim-check.sh SHIM_CHECK [GPIO_SIM_KO]}"
ko="${2:-}"
cfg=/sys/kernel/config
label="cgpiod-check"
tmp="$(mktemp -d)"
passed=0 failed=0

ok() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
# expect NAME WANTED_PART COMMAND...: the command's output contains WANTED_PART.
expect() {
    local name="$1" want="$2" out
    shift 2
    out="$("$@" 2>&1)"
    case "$out" in *"$want"*) ok "$name: $(head -1 <<<"$out")" ;; *) fail "$name: expected '$want': $out" ;; esac
}

# ---- a gpio-sim chip: 8 lines, line 5 named "haptic", bank labelled $label
modprobe configfs 2>/dev/null
mountpoint -q "$cfg" || mount -t configfs none "$cfg" || { echo "cannot mount configfs"; exit 2; }
if [ ! -d "$cfg/gpio-sim" ]; then
    modprobe gpio-sim 2>/dev/null || { [ -n "$ko" ] && insmod "$ko"; } || { echo "cannot load gpio-sim"; exit 2; }
fi
sim="$cfg/gpio-sim/cgpiod-check-$$"
mkdir "$sim" "$sim/gpio-bank0" "$sim/gpio-bank0/line5"
echo 8 >"$sim/gpio-bank0/num_lines"
echo "$label" >"$sim/gpio-bank0/label"
echo haptic >"$sim/gpio-bank0/line5/name"
echo 1 >"$sim/live"
cleanup() {
    echo 0 >"$sim/live"
    rmdir "$sim/gpio-bank0/line5" "$sim/gpio-bank0" "$sim"
    rm -rf "$tmp"
}
trap cleanup EXIT
chip="$(cat "$sim/gpio-bank0/chip_name")"
dev="/dev/$chip"
value="/sys/devices/platform/$(cat "$sim/dev_name")/$chip/sim_gpio5/value"
# until COMMAND...: runs COMMAND every 0.1 s until it succeeds, for up to 60 s (a busy VM).
until_true() {
    for _ in $(seq 600); do "$@" && return 0; sleep 0.1; done
    return 1
}
until_true test -c "$dev"
echo "chip: $chip ($dev, label $label), line 5 \"haptic\", level in $value"
"$bin" version

# The line's physical level is $1 (now).
level_now() { [ "$(cat "$value")" = "$1" ]; }
# Waits for the line's physical level.
level_is() { until_true level_now "$1"; }

expect "chip name, label and line count" "chip: $chip [$label] lines 8" "$bin" info "$dev"
expect "line 5's name, free" 'line 5: "haptic" free ""' "$bin" info "$dev"
expect "line found by name" "offset: 5" "$bin" find "$dev" haptic
expect "no line of that name" "error: ENOENT" "$bin" find "$dev" vibra
expect "offset past the last line" "error: EINVAL" "$bin" try "$dev" 8
out="$("$bin" info /dev/null)"
case "$out" in "error: ENOTTY"* | "error: ENODEV"*) ok "a path that is no chip: $out" ;; *) fail "a path that is no chip: $out" ;; esac

# hold NAME EXPECTED_LEVEL VALUE [active-low]: holds line 5 until its checks are done (the
# holder releases when its standard input closes: no check races a timer on a slow machine),
# checks the level while held, that it shows as used by shim-check and is busy for a second
# request, and the release.
hold() {
    local name="$1" level="$2"
    shift 2
    coproc HOLDER { "$bin" hold "$dev" 5 "$1" ${2:+"$2"} >"$tmp/hold.out" 2>&1; }
    local pid=$HOLDER_PID release=${HOLDER[1]}
    until_true grep -q '^set:\|^error:' "$tmp/hold.out"
    if ! grep -q '^set:' "$tmp/hold.out"; then
        fail "$name: $(cat "$tmp/hold.out")"; exec {release}>&-; wait "$pid"; return
    fi
    if level_is "$level"; then ok "$name: level $level while held"; else fail "$name: level $(cat "$value"), expected $level"; fi
    expect "$name: held by shim-check" 'line 5: "haptic" used "shim-check"' "$bin" info "$dev"
    expect "$name: busy for another request" "error: EBUSY" "$bin" try "$dev" 5
    exec {release}>&-
    wait "$pid"
    if grep -q '^released' "$tmp/hold.out"; then ok "$name: released"; else fail "$name: $(cat "$tmp/hold.out")"; fi
    if [ -z "${2:-}" ]; then
        if level_is 0; then ok "$name: low after release"; else fail "$name: level $(cat "$value") after release"; fi
    fi
    expect "$name: free again after release" "ok" "$bin" try "$dev" 5
}

hold "active" 1 1
hold "inactive" 0 0
hold "active-low, active" 0 1 active-low
hold "active-low, inactive" 1 0 active-low

# Busy: held by another program, which the kernel names. gpioset holds the line until it is
# signalled; the checks wait for the kernel to show it held (up to 60 s), not a fixed time.
if gpioinfo --version 2>/dev/null | awk 'NR == 1 && / v2\./ { v2 = 1 } END { exit !v2 }'; then   # libgpiod 2's tools (Debian 13)
    gpioset -c "$chip" 5=1 &
else
    gpioset --mode=signal "$chip" 5=1 &
fi
gpid=$!
held_by_gpioset() { "$bin" info "$dev" 2>&1 | grep -q 'line 5: "haptic" used "gpioset"'; }
until_true held_by_gpioset
expect "busy (gpioset)" "error: EBUSY" "$bin" try "$dev" 5
expect "held by gpioset" 'line 5: "haptic" used "gpioset"' "$bin" info "$dev"
kill "$gpid"
wait "$gpid" 2>/dev/null

# Permission denied: a user who may not open the chip device.
mode="$(stat -c %a "$dev")"
chmod 600 "$dev"
expect "permission denied" "error: EACCES" setpriv --reuid=65534 --regid=65534 --clear-groups "$bin" info "$dev"
chmod "$mode" "$dev"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
