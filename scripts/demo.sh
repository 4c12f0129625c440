#!/usr/bin/env bash
# The main job, on any machine: starts the reference guidance server (device-config/demo-server.yaml)
# and the agent recording the built-in test pattern (device-config/demo-stream.yaml). The agent
# prints each segment's metadata as it closes, streams it to the server, and logs the guidance
# that comes back. Options replace the default `--segments 3`, e.g. `scripts/demo.sh --segments 6`.
#
# `scripts/demo.sh --vision` plays real footage instead (opencv-doc's vtest.avi, people walking;
# device-config/demo-vision.yaml) to a server running the `vision` analyzer: the guidance spoken
# into out/demo-speech/ is what OpenCV's people detector found, not a script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
swift build -c release --product dashcam-agent
swift build -c release --product RoadVision
swift build -c release --product guidance-server

# The agent refuses a token file others can read.
mkdir -p out
printf 'demo-token-0001\n' > out/demo-token
chmod 600 out/demo-token

# The server takes only a tokens file its owner alone can read; git checks files out readable by all.
install -m 600 device-config/demo-tokens.yaml out/demo-tokens.yaml
agent_config=device-config/demo-stream.yaml
if [ "${1:-}" = "--vision" ]; then
    shift
    agent_config=device-config/demo-vision.yaml
    export GUIDANCE_ANALYZER_KIND=vision
fi
GUIDANCE_SERVER_TOKENS_FILE=out/demo-tokens.yaml .build/release/guidance-server --config device-config/demo-server.yaml &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
sleep 1

[ "$#" -gt 0 ] || set -- --segments 3
.build/release/dashcam-agent record --config "$agent_config" "$@"
