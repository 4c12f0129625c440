#!/usr/bin/env bash
# Drives a simulated GPIO line (gpio-sim) through shim_check: request, set, busy, release,
# active-low, every way of naming the chip and the line, permission denied.
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
value="/sys/devices/platform/$(cat "$sim/dev_name")/$chip/sim_gpio5/value"
for _ in $(seq 50); do [ -c "/dev/$chip" ] && break; sleep 0.1; done
echo "chip: $chip (/dev/$chip, label $label), line 5 \"haptic\", level in $value"
"$bin" version

# Waits up to 5 s for the line's physical level.
level_is() {
    for _ in $(seq 50); do [ "$(cat "$value")" = "$1" ] && return 0; sleep 0.1; done
    return 1
}

# hold NAME EXPECTED_LEVEL EXPECTED_DESCRIPTION_PART CHIP LINE VALUE [active-low]
# Holds the line for 3 s; checks the level while held, the description, and the release.
hold() {
    local name="$1" level="$2" desc="$3" pid
    shift 3
    "$bin" hold "$1" "$2" "$3" 3 ${4:+"$4"} >"$tmp/hold.out" 2>&1 &
    pid=$!
    for _ in $(seq 50); do grep -q '^set:\|^error:' "$tmp/hold.out" && break; sleep 0.1; done
    if ! grep -q '^set:' "$tmp/hold.out"; then
        fail "$name: $(cat "$tmp/hold.out")"; wait "$pid"; return
    fi
    if level_is "$level"; then ok "$name: level $level while held"; else fail "$name: level $(cat "$value"), expected $level"; fi
    if grep -qF -- "$desc" "$tmp/hold.out"; then ok "$name: $(head -1 "$tmp/hold.out")"
    else fail "$name: description lacks '$desc': $(head -1 "$tmp/hold.out")"; fi
    if [ -n "${HOLD_BUSY:-}" ]; then
        out="$("$bin" try "$chip" 5)"
        case "$out" in *"line busy, used by consumer \"shim-check\""*) ok "busy while held: $out" ;;
            *) fail "busy while held: $out" ;; esac
    fi
    wait "$pid"
    if grep -q '^released' "$tmp/hold.out"; then ok "$name: released"; else fail "$name: $(cat "$tmp/hold.out")"; fi
    if out="$("$bin" try "$chip" 5)"; then ok "$name: line free again after release"; else fail "$name: after release: $out"; fi
}

HOLD_BUSY=1 hold "by chip name and offset, active" 1 "$chip [$label] line 5 \"haptic\"" "$chip" 5 1
hold "by chip name and offset, inactive" 0 "line 5" "$chip" 5 0
hold "by path and line name" 1 "line 5 \"haptic\"" "/dev/$chip" haptic 1
hold "by chip number" 1 "$chip [$label] line 5" "${chip#gpiochip}" 5 1
hold "by label and line name" 1 "[$label] line 5" "$label" haptic 1
hold "by line name on any chip" 1 "$chip [$label] line 5 \"haptic\"" - haptic 1
hold "active-low, active" 0 "active-low" "$chip" 5 1 active-low
hold "active-low, inactive" 1 "active-low" "$chip" 5 0 active-low

# Busy: held by another program.
gpioset --mode=time --sec=3 "$chip" 5=1 &
gpid=$!
sleep 1
out="$("$bin" try "$chip" 5)"
case "$out" in *"$chip [$label] line 5 \"haptic\": line busy, used by consumer \"gpioset\""*) ok "busy (gpioset): $out" ;;
    *) fail "busy (gpioset): $out" ;; esac
wait "$gpid"

# Errors on a real chip.
expect_error() {
    local name="$1" want="$2" out
    shift 2
    out="$("$@")"
    case "$out" in "error: "*"$want"*) ok "$name: $out" ;; *) fail "$name: expected '$want': $out" ;; esac
}
expect_error "offset past the last line" "$chip [$label] line 8: no such line (the chip has 8 lines, 0...7)" \
    "$bin" try "$chip" 8
expect_error "no such line name on the chip" "$chip [$label] line \"vibra\": no such line" "$bin" try "$chip" vibra
expect_error "no such line name on any chip" "line \"vibra\" (any chip): no such line (No such file or directory); no chip has it (1 checked)" "$bin" try - vibra
expect_error "no such label" "chip \"no-such-label\" line 5: no such chip (No such file or directory); no chip has that label (1 checked)" "$bin" try no-such-label 5

# Permission denied: a user who may not open the chip device.
mode="$(stat -c %a "/dev/$chip")"
chmod 600 "/dev/$chip"
nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
expect_error "permission denied by name" "chip \"$chip\" (/dev/$chip) line 5: permission denied (Permission denied)" \
    "${nobody[@]}" "$bin" try "$chip" 5
expect_error "permission denied by label" "/dev/$chip: permission denied (Permission denied)" \
    "${nobody[@]}" "$bin" try "$label" 5
expect_error "permission denied, line name on any chip" "/dev/$chip: permission denied (Permission denied)" \
    "${nobody[@]}" "$bin" try - haptic
chmod "$mode" "/dev/$chip"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
