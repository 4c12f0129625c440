#!/usr/bin/env bash
# Local guidance on simulated hardware: the agent records vivid with no server, so it soon warns
# by itself. vivid's brightness control turned down (v4l2-ctl) makes the road too dark:
#   * the agent logs the local "too dark" warning, says it again after offline.repeatMs, and
#     what it plays to hw:Loopback,0,0 is speech when recorded from hw:Loopback,1,0 (sox stat);
#   * `dashcam-agent status --json` shows local guidance on and the last finding `too_dark`;
#   * brightness turned back up stops the warnings: none for three repeat periods, and the loop
#     records near silence meanwhile;
#   * road to voice: from the brightness going down to the warning's first sample in the loop's
#     recording, written to road-to-voice-dark.txt (bench/road_to_voice_vm.sh gathers them).
# hil-case-timeout: 480
set -uo pipefail
HIL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
source "$HIL_DIR/lib.sh"
: "${CASE_DIR:?}" "${AGENT_BIN:?}"

OUT="$CASE_DIR/segments"
STATUS_SOCKET=/tmp/hil-dark-$$.sock
REPEAT_MS=4000
MIN_MAX_AMPLITUDE=0.1
MAX_QUIET_AMPLITUDE=0.02
WARNING="guidance (local): too_dark"
mkdir -p "$OUT"

hil_vivid_fresh || { hil_fail "fresh vivid camera at $HIL_VIDEO_DEV"; hil_case_result; }
hil_audio_ready || { hil_fail "snd-aloop card $HIL_AUDIO_CARD is there"; hil_case_result; }
v4l2-ctl -d "$HIL_VIDEO_DEV" --list-ctrls > "$CASE_DIR/controls.txt" 2>&1
grep -E "brightness|contrast" "$CASE_DIR/controls.txt" | sed 's/^/    /'
v4l2-ctl -d "$HIL_VIDEO_DEV" -c brightness=128

CONFIG="$CASE_DIR/config.yaml"
hil_write_config "$CONFIG" "$OUT"
cat >> "$CONFIG" <<EOF
device:
  locale: en-US
speech:
  sink: alsa
  device: $HIL_AUDIO_PLAYBACK
status:
  socket: $STATUS_SOCKET
guidance:
  offlineAfterMs: 1000
offline:
  repeatMs: $REPEAT_MS
EOF

warnings() { grep -c "$WARNING" "$CASE_DIR/agent.log"; }
# How many utterances the speaker finished, from the status socket.
spoken() {
    "$AGENT_BIN" status --json --socket "$STATUS_SOCKET" 2>/dev/null \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["speech"]["spoken"])' 2>/dev/null
}
at_least_spoken() { local n; n=$(spoken); [ -n "$n" ] && [ "$n" -ge "$1" ]; }
at_least_warnings() { [ "$(warnings)" -ge "$1" ]; }

"$AGENT_BIN" record --config "$CONFIG" > "$CASE_DIR/agent.jsonl" 2> "$CASE_DIR/agent.log" &
agent_pid=$!
start=$(hil_now)

# "Ready", then (no server at all) "no guidance from the server; the camera now warns on its
# own", said alone because the bright picture shows nothing to warn about.
if hil_wait_for 120 grep -q "guidance: local checks on (no session)" "$CASE_DIR/agent.log"; then
    hil_ok "local checks on after $(hil_since "$start")s without a server"
else hil_fail "local checks on within 120 s"; fi
if hil_wait_for 60 at_least_spoken 2; then hil_ok "ready and local-guidance phrases spoken"
else hil_fail "two utterances spoken (status says '$(spoken)')"; fi
if [ "$(warnings)" -eq 0 ]; then hil_ok "no warning while the picture is bright"
else hil_fail "no warning while the picture is bright ($(warnings))"; fi

# ---------------------------------------------------------------- dark
arecord -q -D "$HIL_AUDIO_CAPTURE" -f S16_LE -r 22050 -c 1 -d 600 "$CASE_DIR/dark.wav" 2> "$CASE_DIR/arecord-dark.log" &
arecord_pid=$!
# Road to voice: where the recording is when the picture goes dark (its bytes so far, once it
# runs) against where the first spoken sample is in it (sox, below).
recording() { [ "$(stat -c %s "$CASE_DIR/dark.wav" 2>/dev/null || echo 0)" -gt 22094 ]; }
hil_wait_for 30 recording || hil_fail "arecord records from $HIL_AUDIO_CAPTURE"
dark=$(hil_now)
recorded_at_dark=$(stat -c %s "$CASE_DIR/dark.wav")
v4l2-ctl -d "$HIL_VIDEO_DEV" -c brightness=0
if hil_poll_since "$dark" 60 at_least_warnings 1; then hil_ok "too dark warned ${HIL_ELAPSED}s after the brightness went down"
else hil_fail "too dark warned within 60 s of the brightness going down"; fi
if hil_poll_since "$dark" 90 at_least_warnings 2; then hil_ok "warned again while still dark: $(warnings) warnings after ${HIL_ELAPSED}s"
else hil_fail "a second warning while still dark (got $(warnings))"; fi
status_json=$("$AGENT_BIN" status --json --socket "$STATUS_SOCKET" 2> "$CASE_DIR/status.err")
echo "    status: $status_json"
if python3 - "$status_json" <<'PY'
import json, sys
s = json.loads(sys.argv[1])["localGuidance"]
assert s["state"] == "on" and s["reason"] == "no session", s
assert s["lastFinding"]["finding"] == "too_dark", s
assert s["spoken"] >= 2, s
PY
then hil_ok "status --json: local guidance on, last finding too_dark"
else hil_fail "status --json shows local guidance and too_dark (got: $status_json)"; fi
# Let the second warning play out before the recording stops.
sleep 4
kill -INT "$arecord_pid" 2>/dev/null
wait "$arecord_pid"

# ---------------------------------------------------------------- bright again
v4l2-ctl -d "$HIL_VIDEO_DEV" -c brightness=128
# The checks look at about one frame a second: a few seconds to see it.
sleep 5
before=$(warnings)
arecord -q -D "$HIL_AUDIO_CAPTURE" -f S16_LE -r 22050 -c 1 -d 600 "$CASE_DIR/bright.wav" 2> "$CASE_DIR/arecord-bright.log" &
arecord_pid=$!
sleep $((REPEAT_MS * 3 / 1000))
kill -INT "$arecord_pid" 2>/dev/null
wait "$arecord_pid"
after=$(warnings)
if [ "$after" -eq "$before" ]; then hil_ok "no warning for $((REPEAT_MS * 3 / 1000)) s (three repeat periods) after the brightness went back up"
else hil_fail "no warning once bright again (went from $before to $after)"; fi

kill -TERM "$agent_pid"
wait "$agent_pid"
rc=$?
if [ "$rc" -eq 0 ]; then hil_ok "agent exit 0 on SIGTERM"; else hil_fail "agent exit 0 on SIGTERM (got $rc)"; fi
grep -E "guidance|status:|speech" "$CASE_DIR/agent.log" | sed 's/^/    agent: /' | head -40

# ---------------------------------------------------------------- what the loop heard
for part in dark bright; do
    sox_stat "$CASE_DIR/$part.wav" > "$CASE_DIR/sox-$part.txt"
    echo "    $part:"
    grep -E "Length|Maximum amplitude|RMS" "$CASE_DIR/sox-$part.txt" | sed 's/^/      /'
done
# The first sample louder than 2 % of full scale: sox trims the silence before it.
sox "$CASE_DIR/dark.wav" "$CASE_DIR/dark-from-speech.wav" silence 1 0.005 2% 2> "$CASE_DIR/sox-onset.log"
if latency=$(python3 - "$recorded_at_dark" "$(soxi -D "$CASE_DIR/dark.wav")" "$(soxi -D "$CASE_DIR/dark-from-speech.wav" 2>/dev/null || echo 0)" <<'PY'
import sys
at_dark = (int(sys.argv[1]) - 44) / (22050 * 2)
onset = float(sys.argv[2]) - float(sys.argv[3])
assert float(sys.argv[3]) > 0 and onset > at_dark, "no speech after the change"
print(f"{onset - at_dark:.3f}")
PY
); then
    echo "$latency" > "$CASE_DIR/road-to-voice-dark.txt"
    hil_ok "road to voice: the first sample of the warning ${latency}s after the brightness went down"
else hil_fail "a spoken sample after the brightness went down in dark.wav"; fi
max=$(stat_figure "$CASE_DIR/sox-dark.txt" "Maximum amplitude")
if at_least "$max" "$MIN_MAX_AMPLITUDE"; then hil_ok "the warning was played into the loop: max amplitude $max"
else hil_fail "the warning was played into the loop: max amplitude >= $MIN_MAX_AMPLITUDE (got '$max')"; fi
quiet=$(stat_figure "$CASE_DIR/sox-bright.txt" "Maximum amplitude")
if [ -n "$quiet" ] && ! at_least "$quiet" "$MAX_QUIET_AMPLITUDE"; then hil_ok "nothing played once bright again: max amplitude $quiet"
else hil_fail "nothing played once bright again: max amplitude < $MAX_QUIET_AMPLITUDE (got '$quiet')"; fi

hil_case_result
