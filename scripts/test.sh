#!/usr/bin/env bash
# The project's test command: unit and integration tests, then the hardware-in-the-loop suite
# (a real kernel with the vivid camera under QEMU). HIL=0 skips the VM suite for a quick loop.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
bash Tests/CGPIODShim/run.sh          # the libgpiod shim's error paths, in C
swift build --build-tests
swift test

if [ "${HIL:-1}" != 0 ]; then
    AGENT_BIN="$PWD/.build/debug/dashcam-agent" bash Tests/HIL/run.sh
else
    echo "HIL=0: hardware-in-the-loop suite skipped"
fi
