#!/usr/bin/env bash
# Hostile devices against the release guidance server, one run per analyzer (bench/hostile_devices.py):
# builds the release binary, installs the websockets package if it is missing, and passes its
# arguments on, e.g. `bash bench/hostile_devices.sh --seconds 60 --analyzers vision`.
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product guidance-server --force-resolved-versions
python3 -c 'import websockets' 2>/dev/null || python3 -m pip install websockets
exec python3 bench/hostile_devices.py --bin .build/release/guidance-server "$@"
