#!/usr/bin/env bash
# The `vision` analyzer on real footage nobody here made: opencv-doc's vtest.avi (79.5 s of people
# walking across a campus road, 768x576, 10 fps) cut into 5 s segments by the agent's own file
# source, each analysed by `guidance-server analyze` with `analyzer.kind: vision`. Then the same
# for a darkened copy (each segment must be "too dark") and for 20 s of testsrc2 (no people).
# Prints one line per segment and a summary: segments flagged, CPU per segment.
#
#     swift build -c release --product guidance-server --product dashcam-agent
#     bash bench/vision_vtest.sh            # BIN=.build/release; AGENT=, SERVER= pick binaries apart
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${BIN:-.build/release}
AGENT=${AGENT:-$BIN/dashcam-agent}
SERVER=${SERVER:-$BIN/guidance-server}
VTEST=/usr/share/doc/opencv-doc/examples/data/vtest.avi
[ -f "$VTEST" ] || { echo "needs $VTEST (apt-get install opencv-doc)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# segments NAME VIDEO WIDTH HEIGHT: the agent records VIDEO into 5 s segments under $work/NAME.
segments() {
    cat > "$work/$1.yaml" <<YAML
camera:
  source: file
  file: $2
  width: $3
  height: $4
  fps: 10
  pace: fast
encoder:
  preference: [libx265]
recording:
  dir: $work/$1
haptics:
  required: false
YAML
    "$AGENT" record --config "$work/$1.yaml" > "$work/$1.jsonl" 2> "$work/$1.log"
}

ffmpeg -v error -i "$VTEST" -t 20 -vf "eq=brightness=-0.45" -c:v libx264 -preset ultrafast -y "$work/dark.mp4"
ffmpeg -v error -f lavfi -i testsrc2=size=768x576:rate=10 -t 20 -c:v libx264 -preset ultrafast -y "$work/testsrc2.mp4"
segments vtest "$VTEST" 768 576
segments dark "$work/dark.mp4" 768 576
segments testsrc2 "$work/testsrc2.mp4" 768 576

printf 'analyzer:\n  kind: vision\nledger: "sqlite::memory:"\n' > "$work/vision.yaml"
for name in vtest dark testsrc2; do
    # shellcheck disable=SC2046
    "$SERVER" analyze --config "$work/vision.yaml" --locale en-US --frames 50 \
        $(find "$work/$name" -name '*.mp4' | sort) > "$work/$name.results"
done

python3 - "$work" <<'PY'
import json, statistics, sys
work = sys.argv[1]
for name in ("vtest", "dark", "testsrc2"):
    rows = [json.loads(line) for line in open(f"{work}/{name}.results")]
    for i, row in enumerate(rows):
        print(f"{name:9} {i:3}  {row['priority'] if not row['clear'] else 'clear':7} {row['cpuMs']:5} ms  {row['text']}")
    flagged = sum(1 for r in rows if not r["clear"])
    cpu = [r["cpuMs"] for r in rows]
    kinds = {}
    for r in rows:
        kinds[r["text"] or "clear"] = kinds.get(r["text"] or "clear", 0) + 1
    print(f"{name}: {len(rows)} segments, {flagged} flagged {kinds}; CPU per segment p50 {statistics.median(cpu):.0f} ms, max {max(cpu)} ms")
PY
