#!/usr/bin/env bash
# What local guidance costs on this machine: the agent records a 640x360 video at 10 fps in real
# time with no server, once with local guidance off and once on, and the CPU time it used over
# the same 60 s (utime + stime from /proc) is compared. The difference is the local checks'
# share of one core. Two videos: opencv-doc's vtest.avi scaled to 640x360 (people in every frame,
# so the HOG detector runs on every look) and a dark one (the scene check answers first).
# Then vtest again asking for offline.fps 5: the CPU share (offline.maxCpuPercent, 50) caps it and
# the frames it cannot take are counted as skipped.
#
#     swift build -c release --product dashcam-agent && swift build -c release --product RoadVision
#     bash bench/offline_cpu.sh               # AGENT=.build/release/dashcam-agent, SECONDS_MEASURED=60
#     SIZE=1280x720 FPS_LIST=1 bash bench/offline_cpu.sh    # another camera size; only offline.fps 1
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
AGENT=${AGENT:-.build/release/dashcam-agent}
MEASURED=${SECONDS_MEASURED:-60}
SIZE=${SIZE:-640x360}
WIDTH=${SIZE%x*} HEIGHT=${SIZE#*x}
FPS_LIST=${FPS_LIST:-1 5}
VTEST=/usr/share/doc/opencv-doc/examples/data/vtest.avi
[ -f "$VTEST" ] || { echo "needs $VTEST (apt-get install opencv-doc)" >&2; exit 2; }
work=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$work"' EXIT
ticks=$(getconf CLK_TCK)
length=$((MEASURED + 15))

ffmpeg -v error -stream_loop -1 -i "$VTEST" -t "$length" -vf "scale=$WIDTH:$HEIGHT" -c:v libx264 -preset veryfast -y "$work/people.mp4"
ffmpeg -v error -f lavfi -i "color=c=0x0a0a0a:s=${SIZE}:r=10" -vf "noise=alls=10:allf=t" -t "$length" \
    -c:v libx264 -preset veryfast -y "$work/dark.mp4"

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# run VIDEO ENABLED FPS: prints "cpu_seconds looked skipped last_look_ms dropped_frames"
run() {
    local dir="$work/run-$RANDOM"
    mkdir -p "$dir"
    cat > "$dir/agent.yaml" <<YAML
camera:
  source: file
  file: $1
  width: $WIDTH
  height: $HEIGHT
  fps: 10
encoder:
  preference: [libx265]
recording:
  dir: $dir/rec
speech:
  sink: wav:$dir/speech
status:
  socket: $dir/status.sock
guidance:
  offlineAfterMs: 1000
offline:
  enabled: $2
  fps: $3
log:
  level: warning
YAML
    "$AGENT" record --config "$dir/agent.yaml" > /dev/null 2> "$dir/agent.log" &
    local pid=$!
    # Start-up, the encoder's first frames and the first look are not measured.
    sleep 8
    local before after
    before=$(cpu_ticks "$pid")
    sleep "$MEASURED"
    after=$(cpu_ticks "$pid")
    local status
    status=$("$AGENT" status --json --socket "$dir/status.sock")
    kill -TERM "$pid"
    wait "$pid" || true
    python3 - "$status" "$before" "$after" "$ticks" <<'PY'
import json, sys
status = json.loads(sys.argv[1])
s = status.get("offline") or {}
cpu = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4])
print(f'{cpu:.2f} {s.get("looked", 0)} {s.get("skipped", 0)} {s.get("lastLookMs") or 0:.0f} {status["camera"]["droppedFrames"]}')
PY
}

echo "agent $AGENT; $(nproc) cores; $MEASURED s measured per run at $SIZE, 10 fps; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-34s %9s %8s %8s %10s %12s %14s\n' run "cpu s" looked skipped "look ms" "% of a core" "frames dropped"
for video in people dark; do
    read -r off _ _ _ dropped < <(run "$work/$video.mp4" false 1)
    printf '%-34s %9s %8s %8s %10s %12s %14s\n' "$video, local guidance off" "$off" - - - - "$dropped"
    for fps in $FPS_LIST; do
        [ "$video" = dark ] && [ "$fps" = 5 ] && continue
        read -r on looked skipped look dropped < <(run "$work/$video.mp4" true "$fps")
        share=$(awk -v a="$on" -v b="$off" -v t="$MEASURED" 'BEGIN { printf "%.1f", (a - b) / t * 100 }')
        printf '%-34s %9s %8s %8s %10s %12s %14s\n' "$video, local guidance on, fps $fps" "$on" "$looked" "$skipped" "$look" "$share" "$dropped"
    done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
