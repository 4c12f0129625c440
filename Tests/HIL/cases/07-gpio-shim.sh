#!/usr/bin/env bash
# The CGPIOD target's C (the libgpiod v1 branch on Debian 12, v2 on Debian 13) against a real
# gpio-sim chip: Tests/CGPIODShim/gpio-sim-check.sh with the shim_check binary run.sh built
# against the release under test. Chip lookup, line by name, request/set/release, active-low,
# busy with the holder's name, an offset past the end, permission denied.
set -uo pipefail
HIL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
source "$HIL_DIR/lib.sh"
: "${CASE_DIR:?}"

shim="$HIL_WORK/shim_check"
if [ ! -x "$shim" ]; then
    hil_fail "shim_check built for this release (no $shim)"
    hil_case_result
fi
hil_ok "$("$shim" version 2>&1 | head -1); tools: $(gpioinfo --version | head -1)"
if bash "$HIL_DIR/../CGPIODShim/gpio-sim-check.sh" "$shim" "$HIL_GPIO_SIM_KO" > "$CASE_DIR/gpio-sim-check.log" 2>&1; then
    hil_ok "gpio-sim-check: $(tail -1 "$CASE_DIR/gpio-sim-check.log")"
else
    sed 's/^/    /' "$CASE_DIR/gpio-sim-check.log"
    hil_fail "gpio-sim-check: $(tail -1 "$CASE_DIR/gpio-sim-check.log")"
fi
hil_case_result
