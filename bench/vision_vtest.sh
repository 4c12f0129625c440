#!/usr/bin/env bash
# The `vision` analyzer on real footage nobody here made: opencv-doc's vtest.avi (79.5 s of people
# walking across a campus road, 768x576, 10 fps) cut into 5 s segments by the agent's own file
# source at each camera size of SIZES (the file scaled to it, as a camera of that size would give),
# each analysed by `guidance-server analyze` with `analyzer.kind: vision`. Then the same for a
# darkened copy (each segment must be "too dark") and for 20 s of testsrc2 (no people).
# Prints one line per clip set (P pedestrian, U urgent, D too dark, . clear) and a Markdown table:
# segments flagged, CPU per segment.
#
#     swift build -c release                # every product: the agent, the server, libRoadVision.so
#     bash bench/vision_vtest.sh            # BIN=.build/release; AGENT=, SERVER= pick binaries apart
#     SIZES="640x360" bash bench/vision_vtest.sh
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

SIZES=${SIZES:-640x360 768x576 1280x720}
ffmpeg -v error -i "$VTEST" -t 20 -vf "eq=brightness=-0.45" -c:v libx264 -preset ultrafast -y "$work/dark.mp4"
ffmpeg -v error -f lavfi -i testsrc2=size=768x576:rate=10 -t 20 -c:v libx264 -preset ultrafast -y "$work/testsrc2.mp4"
names=()
for size in $SIZES; do
    width=${size%x*} height=${size#*x}
    segments "vtest-$size" "$VTEST" "$width" "$height"
    segments "dark-$size" "$work/dark.mp4" "$width" "$height"
    segments "testsrc2-$size" "$work/testsrc2.mp4" "$width" "$height"
    names+=("vtest-$size" "dark-$size" "testsrc2-$size")
done

printf 'analyzer:\n  kind: vision\nledger: "sqlite::memory:"\n' > "$work/vision.yaml"
for name in "${names[@]}"; do
    # shellcheck disable=SC2046
    "$SERVER" analyze --config "$work/vision.yaml" --locale en-US --frames 50 \
        $(find "$work/$name" -name '*.mp4' | sort) > "$work/$name.results"
done

python3 - "$work" "${names[@]}" <<'PY'
import json, statistics, sys
work, names = sys.argv[1], sys.argv[2:]
summary = []
for name in names:
    rows = [json.loads(line) for line in open(f"{work}/{name}.results")]
    marks = "".join("." if r["clear"] else ("U" if r["priority"] == "urgent" else "P" if r["text"].startswith("Pedestrian") else "D" if "dark" in r["text"] else "?") for r in rows)
    flagged = sum(1 for r in rows if not r["clear"])
    cpu = [r["cpuMs"] for r in rows]
    kinds = {}
    for r in rows:
        kinds[r["text"] or "clear"] = kinds.get(r["text"] or "clear", 0) + 1
    print(f"{name:18} {marks}  {flagged}/{len(rows)} flagged {kinds}")
    summary.append((name, len(rows), flagged, statistics.median(cpu), max(cpu)))
print()
print("| clips | segments | flagged | CPU per segment, p50 / max |")
print("|---|---|---|---|")
for name, count, flagged, p50, top in summary:
    print(f"| {name} | {count} | {flagged} | {p50:.0f} / {top} ms |")
PY
