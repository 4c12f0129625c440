#!/usr/bin/env bash
# The project's test command, on both Debian releases the agent supports: on this machine
# (Debian 12) unit and integration tests, the release .deb through lintian and the
# hardware-in-the-loop suite (a real kernel with the vivid camera under QEMU), and the .deb
# installed with apt on a Debian 12 root that boots with systemd under QEMU; then on Debian 13, in
# a root scripts/debian13.sh makes, what that release changes: its .deb through its lintian and
# booted on a trixie root, and the VM cases its libraries touch (DEBIAN13_TESTS=1 adds the Swift
# build and tests there). HIL=0 skips the VM suites, PACKAGE=0 the release packages, BOOT=0 the
# boot, DEBIAN13=0 the Debian 13 half, for a quick loop.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=steps.sh
source scripts/steps.sh

step "Debian 12: packages" bash scripts/install-deps.sh

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
        # At the lowest priority for the CPU and the disk: the tests beside it come first. The
        # system tests that encode dozens of segments slow down with every process beside them
        # (one took over ten minutes with four CPU hogs and another encoder beside the target).
        renice -n 19 -p "$BASHPID" >/dev/null || true
        ionice -c 2 -n 7 -p "$BASHPID" || true
        # Each on its own: one that fails leaves the others to do.
        failed=0
        if [ "${DEBIAN13:-1}" != 0 ]; then bash scripts/debian13.sh root || failed=1; fi
        if [ "${PACKAGE:-1}" != 0 ] && [ "${BOOT:-1}" != 0 ]; then
            BOOT_RELEASE=bookworm bash Tests/Boot/run.sh --base || failed=1
            if [ "${DEBIAN13:-1}" != 0 ]; then BOOT_RELEASE=trixie bash Tests/Boot/run.sh --base || failed=1; fi
        fi
        if [ "${HIL:-1}" != 0 ]; then bash Tests/HIL/run.sh --prepare || failed=1; fi
        exit "$failed"
    ) > "$ROOTS_LOG" 2>&1 < /dev/null &
    ROOTS_PID=$!
}
# A run that ends early (a step failed) leaves nothing of that work running after it: the half-made
# roots are made again by the next run.
stop_tree() {
    local child
    for child in $(pgrep -P "$1"); do stop_tree "$child"; done
    kill -TERM "$1" 2>/dev/null || true
}
stop_roots() { [ -z "$ROOTS_PID" ] || stop_tree "$ROOTS_PID"; }
# And Debian 13's release build, started in the background (below).
RELEASE13_PID=
stop_release13() { [ -z "$RELEASE13_PID" ] || stop_tree "$RELEASE13_PID"; }
trap 'stop_roots; stop_release13' EXIT
# Waited for before the first step that boots a VM or uses a root. The Swift tests and the release
# build run beside the downloads: no test depends on the machine's pace (scripts/stress-tests.sh).
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
fi
step "Debian 12: resolve dependencies (Package.resolved)" swift package resolve "${RESOLVED_FLAGS[@]}"
step "Debian 12: libgpiod shim checks (C)" bash Tests/CGPIODShim/run.sh
# The Swift sources as the formatter writes them (.swift-format: 4 spaces, lines of 140); a file it
# would change fails the run. `swift format format --in-place --recursive --parallel` on the same
# paths fixes them.
step "Debian 12: swift format lint (.swift-format)" swift format lint --strict --recursive --parallel "${FORMAT_PATHS[@]}"
step "Debian 12: swift build --build-tests" swift build --build-tests "${DEBUG_BUILD_FLAGS[@]}"
for target in "${TEST_TARGETS[@]}"; do
    step "Debian 12: swift test $target" swift_tests "$target"
done
# Every fuzz target's seed corpus and the inputs that once broke it, through the parsers as built.
replay_fuzz_inputs() {
    for target in messages answers segments pairing gpsd iio mjpeg smtp; do
        .build/debug/guidance-fuzz "$target" "fuzz/corpus/$target" $( [ -d "fuzz/regressions/$target" ] && echo "fuzz/regressions/$target" )
    done
}
step "Debian 12: fuzz corpora and regressions replayed" replay_fuzz_inputs
# The owners' pages in headless Chromium, against the built server and agent; screenshots in
# .build/browser.
step "Debian 12: owners' pages in a real browser" bash -c 'bash Tests/Browser/install.sh && python3 Tests/Browser/owner_pages.py --bin .build/debug --out .build/browser'

# The package as shipped: a release build with the static Swift stdlib, listed by dpkg-deb and
# checked by lintian (no error, no warning that is not overridden with a reason).
if [ "${PACKAGE:-1}" != 0 ]; then
    mkdir -p .build-release
    step "Debian 12: release .deb" env DEB_SCRATCH="$PWD/.build-release" DEB_OUT="$PWD/.build-release/deb" \
        bash deploy/build-deb.sh > .build-release/deb.path
    step "Debian 12: dpkg-deb, lintian" bash deploy/check-deb.sh "$(cat .build-release/deb.path)"
else
    echo "PACKAGE=0: release package skipped"
fi

step "roots and VM parts: made beside the build and tests (wait)" wait_roots

# Debian 13's release build runs beside the Debian 12 VMs, in the idle scheduling class: it gets
# only the CPU the VMs leave (under TCG they keep 1.1–1.3 of 2 cores busy), and gives it back the
# moment they want it. (SCHED_IDLE, which the compilers SwiftPM starts keep; a `nice` value they
# do not.) The Swift tests run alone: they share the machine only with the downloads.
# idle_wait PID LOG: waits for it; when it failed, prints the end of its log and fails.
idle_wait() {
    if wait "$1"; then grep -A20 '^=== .*passed; times:' "$2" >&2 || true; return 0; fi
    echo "failed; the end of $2:" >&2
    tail -40 "$2" >&2
    return 1
}
if [ "${DEBIAN13:-1}" != 0 ] && [ "${PACKAGE:-1}" != 0 ]; then
    mkdir -p .build-debian13
    rm -f .build-debian13/deb.path
    echo "started beside the Debian 12 VMs, in the idle class: Debian 13's release .deb (log: .build-debian13/release-beside.log)" >&2
    chrt --idle 0 bash scripts/debian13.sh release_build > .build-debian13/release-beside.log 2>&1 < /dev/null &
    RELEASE13_PID=$!
fi

# The agent the package ships (the release build; the debug one with PACKAGE=0), with the debug
# build's guidance-server for case 30.
if [ "${HIL:-1}" != 0 ]; then
    agent="$PWD/.build/debug/dashcam-agent"
    [ "${PACKAGE:-1}" = 0 ] || agent="$PWD/.build-release/release/dashcam-agent"
    step "Debian 12: hardware-in-the-loop (VM)" env AGENT_BIN="$agent" SERVER_BIN="$PWD/.build/debug/guidance-server" bash Tests/HIL/run.sh
else
    echo "HIL=0: hardware-in-the-loop suite skipped"
fi

# The .deb as a board gets it: installed with apt on a Debian 12 root that boots with systemd.
if [ "${PACKAGE:-1}" != 0 ] && [ "${BOOT:-1}" != 0 ]; then
    step "Debian 12: the .deb booted with systemd (VM)" bash Tests/Boot/run.sh "$(cat .build-release/deb.path)"
else
    echo "PACKAGE=0 or BOOT=0: boot test skipped"
fi

# Debian 13: its own root, libraries, lintian and VM userspace; the same steps (see the script).
if [ "${DEBIAN13:-1}" != 0 ]; then
    if [ -n "$RELEASE13_PID" ]; then
        step "Debian 13: release .deb (built beside the Debian 12 VMs; the wait)" idle_wait "$RELEASE13_PID" .build-debian13/release-beside.log
    fi
    step "Debian 13: all of the above" env DEBIAN13_RELEASE_BUILT="$([ -n "$RELEASE13_PID" ] && echo 1 || echo 0)" bash scripts/debian13.sh test
else
    echo "DEBIAN13=0: Debian 13 skipped"
fi

step_times "passed; times:"
