#!/usr/bin/env bash
# The project's test command, on both Debian releases the agent supports: on this machine
# (Debian 12) unit and integration tests, the release .deb through lintian and the
# hardware-in-the-loop suite (a real kernel with the vivid camera under QEMU), and the .deb
# installed with apt on a Debian 12 root that boots with systemd under QEMU; then the same on
# Debian 13, in a root scripts/debian13.sh makes (its package booted on a trixie root). HIL=0 skips the VM suites,
# PACKAGE=0 the release packages, BOOT=0 the boot, DEBIAN13=0 the Debian 13 half, for a quick loop.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=steps.sh
source scripts/steps.sh

step "Debian 12: packages" bash scripts/install-deps.sh

# Two lanes. In front, the builds and the Swift tests, one after another: each keeps both cores
# busy. Beside them, the VM suites (QEMU under TCG leaves most of a core, and waits on the
# agent's 5-s segments): each starts as soon as what it boots is built, its output prefixed
# "[vm]". A lane passes "built" to the other with a mark (a file in .build-ci/marks); a step that
# fails in either lane ends the run.
MARKS=.build-ci/marks
rm -rf "$MARKS"
mkdir -p "$MARKS"
mark() { touch "$MARKS/$1"; }
await() {
    local m
    for m in "$@"; do
        until [ -e "$MARKS/$m" ]; do
            [ ! -e "$MARKS/failed" ] || exit 1
            sleep 2
        done
    done
}
# Every step in front stops the run if the VM lane has failed (scripts/steps.sh).
export STEP_STOP_FILE="$PWD/$MARKS/failed"

# The Debian roots later steps start from (Debian 13's build root, the boot tests' bases) and the
# VM suite's host packages and gpio-sim module are downloaded, unpacked and built while this
# machine compiles: network and disk beside the CPU's work. The steps that use them make them
# again if this did not finish (the log says why).
ROOTS_LOG=.build-boot/roots.log
ROOTS_PID=
prepare_roots() {
    command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
    mkdir -p .build-boot
    (
        # Each on its own: one that fails leaves the others to do.
        failed=0
        if [ "${DEBIAN13:-1}" != 0 ]; then bash scripts/debian13.sh root || failed=1; fi
        if [ "${PACKAGE:-1}" != 0 ] && [ "${BOOT:-1}" != 0 ]; then
            BOOT_RELEASE=bookworm bash Tests/Boot/run.sh --base || failed=1
            if [ "${DEBIAN13:-1}" != 0 ]; then BOOT_RELEASE=trixie bash Tests/Boot/run.sh --base || failed=1; fi
        fi
        if [ "${HIL:-1}" != 0 ]; then bash Tests/HIL/run.sh --prepare || failed=1; fi
        if [ "$failed" = 0 ]; then echo "roots ready"; else echo "making the roots beside the build failed; the steps that use them try again"; fi
        mark roots
        exit "$failed"
    ) > "$ROOTS_LOG" 2>&1 &
    ROOTS_PID=$!
}
# Waited for before the first step in front that uses a root (Debian 13's); the VM lane waits for
# the mark instead.
wait_roots() {
    [ -n "$ROOTS_PID" ] || return 0
    if wait "$ROOTS_PID"; then
        echo "roots ready ($ROOTS_LOG)" >&2
    else
        echo "making the roots beside the build failed; the steps that use them try again. The end of $ROOTS_LOG:" >&2
        tail -20 "$ROOTS_LOG" >&2
    fi
    ROOTS_PID=
}
if [ "${DEBIAN13:-1}" != 0 ] || [ "${HIL:-1}" != 0 ] || { [ "${PACKAGE:-1}" != 0 ] && [ "${BOOT:-1}" != 0 ]; }; then
    step "roots and VM parts: started beside the build" prepare_roots
else
    mark roots
fi

# The VM lane. The hardware-in-the-loop suite runs the agent the package ships (the release
# build; the debug one with PACKAGE=0), with the debug build's guidance-server for case 30.
RELEASE_AGENT="$PWD/.build-release/release/dashcam-agent"
vm_lane() {
    trap '[ $? = 0 ] || touch "$MARKS/failed"' EXIT
    # The VMs go first. QEMU under TCG emulates every instruction: a VM that shared the cores
    # evenly with two compilers ran at a fraction of its pace, and the time limits inside it
    # (systemd's TimeoutStopSec, the watchdog) measured the build, not the agent. Raised here
    # (root may), not lowered in front: the build tool starts its compilers at the default.
    renice -n -10 -p "$BASHPID" > /dev/null ||
        echo "warning: the VM lane's priority could not be raised; its VMs share the CPU with the builds" >&2
    STEP_TIMES=()
    if [ "${PACKAGE:-1}" != 0 ] && [ "${BOOT:-1}" != 0 ]; then
        await roots release12
        step "Debian 12: the .deb booted with systemd (VM)" bash Tests/Boot/run.sh "$(cat .build-release/deb.path)"
    else
        echo "PACKAGE=0 or BOOT=0: boot tests skipped"
    fi
    if [ "${HIL:-1}" != 0 ]; then
        local agent="$PWD/.build/debug/dashcam-agent"
        [ "${PACKAGE:-1}" = 0 ] || { await release12; agent=$RELEASE_AGENT; }
        await roots debug12
        step "Debian 12: hardware-in-the-loop (VM)" env AGENT_BIN="$agent" SERVER_BIN="$PWD/.build/debug/guidance-server" bash Tests/HIL/run.sh
    else
        echo "HIL=0: hardware-in-the-loop suites skipped"
    fi
    if [ "${DEBIAN13:-1}" != 0 ]; then
        if [ "${PACKAGE:-1}" != 0 ] && [ "${BOOT:-1}" != 0 ]; then
            await release13
            bash scripts/debian13.sh boot
        fi
        if [ "${HIL:-1}" != 0 ]; then
            [ "${PACKAGE:-1}" = 0 ] || await release13
            await debug13
            bash scripts/debian13.sh hil
        fi
    fi
    step_times "VM lane passed; times:"
}
VM_PID=
stop_vm_lane() {
    [ -n "$VM_PID" ] || return 0
    # The lane and everything under it (QEMU runs in timeout's own process group).
    local pids=("$VM_PID") i=0 p
    while [ "$i" -lt "${#pids[@]}" ]; do
        for p in $(pgrep -P "${pids[$i]}" || true); do pids+=("$p"); done
        i=$((i + 1))
    done
    kill -9 "${pids[@]}" 2>/dev/null || true
}
trap stop_vm_lane EXIT
vm_lane > >(sed -u 's/^/[vm] /' >&2) 2>&1 &
VM_PID=$!

step "Debian 12: resolve dependencies (Package.resolved)" swift package resolve "${RESOLVED_FLAGS[@]}"
step "Debian 12: libgpiod shim checks (C)" bash Tests/CGPIODShim/run.sh
# The package as shipped first, so the VM lane boots it while the debug build runs: a release
# build with the static Swift stdlib, listed by dpkg-deb and checked by lintian (no error, no
# warning that is not overridden with a reason).
if [ "${PACKAGE:-1}" != 0 ]; then
    mkdir -p .build-release
    step "Debian 12: release .deb" env DEB_SCRATCH="$PWD/.build-release" DEB_OUT="$PWD/.build-release/deb" \
        bash deploy/build-deb.sh > .build-release/deb.path
    mark release12
    step "Debian 12: dpkg-deb, lintian" bash deploy/check-deb.sh "$(cat .build-release/deb.path)"
else
    echo "PACKAGE=0: release package skipped"
fi
step "Debian 12: swift build --build-tests" swift build --build-tests "${DEBUG_BUILD_FLAGS[@]}"
mark debug12
for target in "${TEST_TARGETS[@]}"; do
    step "Debian 12: swift test $target" swift_tests "$target"
done
# Every fuzz target's seed corpus and the inputs that once broke it, through the parsers as built.
replay_fuzz_inputs() {
    for target in messages answers segments pairing gpsd iio; do
        .build/debug/guidance-fuzz "$target" "fuzz/corpus/$target" $( [ -d "fuzz/regressions/$target" ] && echo "fuzz/regressions/$target" )
    done
}
step "Debian 12: fuzz corpora and regressions replayed" replay_fuzz_inputs
# The owners' pages in headless Chromium, against the built server and agent; screenshots in
# .build/browser.
step "Debian 12: owners' pages in a real browser" bash -c 'bash Tests/Browser/install.sh && python3 Tests/Browser/owner_pages.py --bin .build/debug --out .build/browser'

# Debian 13: its own root, libraries and lintian; the same steps (see the script), its release
# .deb first for the VM lane, as above.
if [ "${DEBIAN13:-1}" != 0 ]; then
    step "roots and VM parts: made beside the build and tests (wait)" wait_roots
    if [ "${PACKAGE:-1}" != 0 ]; then
        bash scripts/debian13.sh release
        mark release13
    fi
    bash scripts/debian13.sh build
    mark debug13
    bash scripts/debian13.sh tests
else
    echo "DEBIAN13=0: Debian 13 skipped"
fi

step "the VM lane (wait)" wait "$VM_PID"
VM_PID=
step_times "passed; times:"
