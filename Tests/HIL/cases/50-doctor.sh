#!/usr/bin/env bash
# `dashcam-agent doctor` on simulated hardware, as a first install runs it:
#   * with the agent stopped: the camera (vivid) gives frames, libx265 opens, the motor's line
#     (gpio-sim, found by name) goes 1 then 0 for the test buzz, the test phrase is spoken in
#     Korean to snd-aloop and recorded back as sound (sox stat), the ko voice is found; exit 0
#     unless the clock check fails;
#   * with the agent recording: the camera check fails and its fix says to stop the service;
#   * --no-buzz --quiet: the line does not move and nothing is played;
#   * setup --board with a profile asking a size and rate vivid does not list: the file names the
#     camera by its stable link, takes the nearest size and rate v4l2-ctl lists, keeps the user's
#     keys, and the agent records with it (ffprobe: the size setup wrote).
# hil-case-timeout: 480
set -uo pipefail
HIL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
source "$HIL_DIR/lib.sh"
: "${CASE_DIR:?}" "${AGENT_BIN:?}"

OUT="$CASE_DIR/segments"
MIN_MAX_AMPLITUDE=0.1
mkdir -p "$OUT"

hil_vivid_fresh || { hil_fail "fresh vivid camera at $HIL_VIDEO_DEV"; hil_case_result; }
[ -n "${HIL_GPIO_CHIP:-}" ] || { hil_fail "gpio-sim chip is live"; hil_case_result; }
hil_audio_ready || { hil_fail "snd-aloop card $HIL_AUDIO_CARD is there"; hil_case_result; }

CONFIG="$CASE_DIR/config.yaml"
hil_write_config "$CONFIG" "$OUT"
cat >> "$CONFIG" <<EOF
device:
  locale: ko-KR
speech:
  sink: alsa
  device: $HIL_AUDIO_PLAYBACK
haptics:
  chip: $HIL_GPIO_CHIP
  line: $HIL_HAPTIC_NAME
  required: true
status:
  socket: /tmp/hil-doctor-$$.sock
EOF

# ---------------------------------------------------------------- setup --board
# A board asking 352x198 at 7 fps, which vivid does not list; the user's file already names the
# simulated motor, speaker and folder.
PROFILES="$CASE_DIR/profiles"
mkdir -p "$PROFILES/boards"
cp "$HIL_DIR/../../device-config/default.yaml" "$PROFILES/default.yaml" || hil_fail "the package's default.yaml is readable in the VM"
cat > "$PROFILES/boards/hil-board.yaml" <<EOF
camera:
  source: v4l2
  device: /dev/dashcam-camera
  width: 352
  height: 198
  fps: 7
encoder:
  preference: [libx265]
haptics:
  chip: gpiochip0
  line: "17"
EOF
SETUP="$CASE_DIR/agent.yaml"
SETUP_OUT="$CASE_DIR/setup-segments"
cat > "$SETUP" <<EOF
camera:
  buffers: 16
encoder:
  segmentSeconds: $HIL_SEGMENT_SECONDS
recording:
  dir: $SETUP_OUT
haptics:
  chip: $HIL_GPIO_CHIP
  line: $HIL_HAPTIC_NAME
status:
  socket: /tmp/hil-setup-$$.sock
EOF
"$AGENT_BIN" setup --board hil-board --profiles "$PROFILES" --config "$SETUP" > "$CASE_DIR/setup.txt" 2>&1
setup_rc=$?
sed 's/^/    /' "$CASE_DIR/setup.txt"
# key SECTION KEY: the value setup wrote.
key() { awk -v s="$1:" -v k="$2:" '$0 == s { in_s = 1; next } /^[a-z]/ { in_s = 0 } in_s && $1 == k { print $2 }' "$SETUP"; }
stable=$HIL_VIDEO_DEV
for link in /dev/v4l/by-path/* /dev/v4l/by-id/*; do
    [ -L "$link" ] && [ "$(readlink -f "$link")" = "$HIL_VIDEO_DEV" ] && stable=$link
done
width=$(key camera width) height=$(key camera height) fps=$(key camera fps)
if [ "$setup_rc" -eq 0 ] && [ "$(key camera device)" = "$stable" ]; then hil_ok "setup: camera.device $stable"
else hil_fail "setup exit 0 naming the camera $stable (got $setup_rc, '$(key camera device)')"; fi
offered=$(v4l2-ctl -d "$HIL_VIDEO_DEV" --list-formats-ext | awk -v size="${width}x${height}" -v rate="(${fps}.000 fps)" '
    $1 == "Size:" { here = ($3 == size) } here && index($0, rate) { found = 1 } END { print found ? "yes" : "no" }')
if [ "$offered" = yes ] && [ "${width}x${height}" != 352x198 ] && [ "$fps" != 7 ] && grep -q "the camera has no 352x198" "$CASE_DIR/setup.txt"; then
    hil_ok "setup: ${width}x${height} at $fps fps, which v4l2-ctl lists (the board asked 352x198 at 7)"
else hil_fail "setup took a size and rate v4l2-ctl lists, with a note (got ${width}x${height} at $fps: $offered)"; fi
if [ "$(key haptics chip)" = "$HIL_GPIO_CHIP" ] && [ "$(key recording dir)" = "$SETUP_OUT" ] && [ "$(key encoder preference)" = "[libx265]" ]; then
    hil_ok "setup: the user's keys kept, the board's added"
else hil_fail "setup kept haptics.chip and recording.dir and took the board's encoder"; fi

# outcome FILE CHECK: the outcome doctor's JSON gives a check.
outcome() {
    python3 -c 'import json,sys; print(next(c["outcome"] for c in json.load(open(sys.argv[1]))["checks"] if c["name"] == sys.argv[2]))' "$1" "$2" 2>/dev/null
}
field() {
    python3 -c 'import json,sys; print(next(c.get(sys.argv[3]) or "" for c in json.load(open(sys.argv[1]))["checks"] if c["name"] == sys.argv[2]))' "$1" "$2" "$3" 2>/dev/null
}

# ---------------------------------------------------------------- the agent stopped
hil_watch_haptic_line "$CASE_DIR/stop-watch" > "$CASE_DIR/line.log" &
watch_pid=$!
arecord -q -D "$HIL_AUDIO_CAPTURE" -f S16_LE -r 22050 -c 1 -d 120 "$CASE_DIR/speech.wav" 2> "$CASE_DIR/arecord.log" &
arecord_pid=$!
start=$(hil_now)
"$AGENT_BIN" doctor --config "$CONFIG" --json > "$CASE_DIR/doctor.json" 2> "$CASE_DIR/doctor.err"
rc=$?
hil_log "doctor took $(hil_since "$start")s, exit $rc"
sleep 1
touch "$CASE_DIR/stop-watch"
wait "$watch_pid"
kill "$arecord_pid" 2>/dev/null; wait "$arecord_pid" 2>/dev/null
"$AGENT_BIN" doctor --config "$CONFIG" --quiet --no-buzz > "$CASE_DIR/doctor.txt" 2>&1
sed 's/^/    /' "$CASE_DIR/doctor.txt"

clock=$(outcome "$CASE_DIR/doctor.json" clock)
if [ "$rc" -eq 0 ] || [ "$clock" = failed ]; then hil_ok "doctor: exit $rc (clock: $clock)"
else hil_fail "doctor exit 0 with the hardware in place (got $rc: $(cat "$CASE_DIR/doctor.err"))"; fi
camera=$(outcome "$CASE_DIR/doctor.json" camera)
if [ "$camera" = ok ] || { [ "$camera" = warning ] && field "$CASE_DIR/doctor.json" camera detail | grep -q "frames at"; }; then
    hil_ok "camera: $(field "$CASE_DIR/doctor.json" camera detail)"
else hil_fail "camera check ok (got $camera: $(field "$CASE_DIR/doctor.json" camera detail))"; fi
for check in encoder motor speaker voice recording; do
    got=$(outcome "$CASE_DIR/doctor.json" "$check")
    if [ "$got" = ok ]; then hil_ok "$check: $(field "$CASE_DIR/doctor.json" "$check" detail)"
    else hil_fail "$check check ok (got $got: $(field "$CASE_DIR/doctor.json" "$check" detail))"; fi
done
sed 's/^/    line: /' "$CASE_DIR/line.log"
if grep -q ' 1$' "$CASE_DIR/line.log" && tail -n 1 "$CASE_DIR/line.log" | grep -q ' 0$'; then hil_ok "the test buzz: the line went 1 then 0"
else hil_fail "the test buzz moved the line 1 then 0"; fi
STAT="$CASE_DIR/sox-stat.txt"
sox_stat "$CASE_DIR/speech.wav" > "$STAT"
max=$(stat_figure "$STAT" "Maximum amplitude")
if at_least "$max" "$MIN_MAX_AMPLITUDE"; then hil_ok "the test phrase recorded from the loop: max amplitude $max"
else hil_fail "the test phrase recorded from the loop: max amplitude >= $MIN_MAX_AMPLITUDE (got '$max')"; cat "$CASE_DIR/arecord.log"; fi
if grep -q "^\[--\] speaker" "$CASE_DIR/doctor.txt" && grep -q "^\[ok\] motor: .*no buzz" "$CASE_DIR/doctor.txt"; then
    hil_ok "--quiet --no-buzz: nothing played, no buzz"
else hil_fail "--quiet --no-buzz skipped the phrase and the buzz"; fi

# ---------------------------------------------------------------- the agent recording, with setup's file
"$AGENT_BIN" record --config "$SETUP" > "$CASE_DIR/agent.jsonl" 2> "$CASE_DIR/agent.log" &
agent_pid=$!
if hil_wait_for 120 grep -q "camera: .* opened" "$CASE_DIR/agent.log"; then
    "$AGENT_BIN" doctor --config "$CONFIG" --json --quiet --no-buzz > "$CASE_DIR/doctor-busy.json" 2> "$CASE_DIR/doctor-busy.err"
    busy_rc=$?
    fix=$(field "$CASE_DIR/doctor-busy.json" camera fix)
    if [ "$busy_rc" -eq 1 ] && [ "$(outcome "$CASE_DIR/doctor-busy.json" camera)" = failed ] && [[ $fix == *"systemctl stop dashcam-agent"* ]]; then
        hil_ok "agent recording: camera failed, fix: $fix"
    else hil_fail "agent recording: camera failed with a fix naming the service (got exit $busy_rc: $(cat "$CASE_DIR/doctor-busy.json"))"; fi
else
    hil_fail "agent opened the camera"
fi
has_segment() { [ -n "$(hil_segments "$SETUP_OUT")" ]; }
if hil_wait_for 120 has_segment; then
    segment="$SETUP_OUT/$(hil_segments "$SETUP_OUT" | head -1)"
    probed=$(ffprobe -v error -select_streams v:0 -show_entries stream=codec_name,width,height -of csv=p=0 "$segment")
    if [ "$probed" = "hevc,$width,$height" ]; then hil_ok "recording with setup's file: $probed"
    else hil_fail "a segment of ${width}x${height} from setup's file (ffprobe: $probed)"; fi
else
    hil_fail "a segment recorded with setup's file"
fi
kill -TERM "$agent_pid"
wait "$agent_pid"

hil_case_result
