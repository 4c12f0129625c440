#!/usr/bin/env bash
# `dashcam-agent doctor` on simulated hardware, as a first install runs it:
#   * with the agent stopped: the camera (vivid) gives frames, libx265 opens, the motor's line
#     (gpio-sim, found by name) goes 1 then 0 for the test buzz, the test phrase is spoken in
#     Korean to snd-aloop and recorded back as sound (sox stat), the ko voice is found; exit 0
#     unless the clock check fails;
#   * with the agent recording: the camera check fails and its fix says to stop the service;
#   * --no-buzz --quiet: the line does not move and nothing is played.
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

# ---------------------------------------------------------------- the agent recording
"$AGENT_BIN" record --config "$CONFIG" > "$CASE_DIR/agent.jsonl" 2> "$CASE_DIR/agent.log" &
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
kill -TERM "$agent_pid"
wait "$agent_pid"

hil_case_result
