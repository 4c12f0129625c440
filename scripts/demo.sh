#!/usr/bin/env bash
# The main job, on any machine: records the built-in test pattern (device-config/demo.yaml)
# into HEVC segments under out/demo-segments and prints each segment's metadata as it closes.
# Options replace the default `--segments 3`, e.g. `scripts/demo.sh --segments 6`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
swift build -c release --product dashcam-agent
[ "$#" -gt 0 ] || set -- --segments 3
exec .build/release/dashcam-agent record --config device-config/demo.yaml "$@"
