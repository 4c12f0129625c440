#!/usr/bin/env bash
# The project's test command: unit and integration tests, then the hardware-in-the-loop suite
# (a real kernel with the vivid camera under QEMU). HIL=0 skips the VM suite, PACKAGE=0 the release
# .deb, for a quick loop.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
bash Tests/CGPIODShim/run.sh          # the libgpiod shim's error paths, in C
swift build --build-tests
swift test

# The package as shipped: a release build with the static Swift stdlib, listed by dpkg-deb and
# checked by lintian (no error, no warning that is not overridden with a reason).
if [ "${PACKAGE:-1}" != 0 ]; then
    deb=$(DEB_SCRATCH="$PWD/.build-release" DEB_OUT="$PWD/.build-release/deb" bash deploy/build-deb.sh)
    dpkg-deb --info "$deb"
    dpkg-deb --contents "$deb"
    lintian --fail-on error,warning "$deb"
else
    echo "PACKAGE=0: release package skipped"
fi

if [ "${HIL:-1}" != 0 ]; then
    AGENT_BIN="$PWD/.build/debug/dashcam-agent" bash Tests/HIL/run.sh
else
    echo "HIL=0: hardware-in-the-loop suite skipped"
fi
