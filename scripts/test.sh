#!/usr/bin/env bash
# The project's test command, on both Debian releases the agent supports: on this machine
# (Debian 12) unit and integration tests, the release .deb through lintian and the
# hardware-in-the-loop suite (a real kernel with the vivid camera under QEMU); then the same on
# Debian 13, in a root scripts/debian13.sh makes. HIL=0 skips the VM suites, PACKAGE=0 the
# release packages, DEBIAN13=0 the Debian 13 half, for a quick loop.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TIMES=()
# part NAME CMD...: runs CMD and notes how long it took (printed at the end).
part() {
    local name=$1 start=$SECONDS; shift
    echo "=== $name"
    "$@"
    TIMES+=("$(printf '%-36s %5d s' "$name" $((SECONDS - start)))")
}

package() {
    local deb
    deb=$(DEB_SCRATCH="$PWD/.build-release" DEB_OUT="$PWD/.build-release/deb" bash deploy/build-deb.sh)
    dpkg-deb --info "$deb"
    dpkg-deb --contents "$deb"
    lintian --fail-on error,warning "$deb"
}

part "Debian 12: packages" bash scripts/install-deps.sh
part "Debian 12: libgpiod shim checks (C)" bash Tests/CGPIODShim/run.sh
part "Debian 12: swift build --build-tests" swift build --build-tests
part "Debian 12: swift test" swift test

# The package as shipped: a release build with the static Swift stdlib, listed by dpkg-deb and
# checked by lintian (no error, no warning that is not overridden with a reason).
if [ "${PACKAGE:-1}" != 0 ]; then
    part "Debian 12: release .deb, lintian" package
else
    echo "PACKAGE=0: release package skipped"
fi

if [ "${HIL:-1}" != 0 ]; then
    part "Debian 12: hardware-in-the-loop (VM)" env AGENT_BIN="$PWD/.build/debug/dashcam-agent" bash Tests/HIL/run.sh
else
    echo "HIL=0: hardware-in-the-loop suite skipped"
fi

# Debian 13: its own root, libraries, lintian and VM userspace; the same steps (see the script).
if [ "${DEBIAN13:-1}" != 0 ]; then
    part "Debian 13: all of the above" bash scripts/debian13.sh test
else
    echo "DEBIAN13=0: Debian 13 skipped"
fi

echo "=== passed; times:"
printf '  %s\n' "${TIMES[@]}"
