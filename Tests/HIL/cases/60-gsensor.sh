#!/usr/bin/env bash
# G-sensor incidents on a real IIO driver: a LIS3DH made by i2c-stub and bound to Debian's
# st_accel_i2c (lib.sh's hil_load_lis3dh), read by the agent through sysfs while it records vivid.
# Writing the chip's axis registers is the shock (2 g from the side for a second):
#   * the agent logs and saves one incident; `status --json` lists it (time, peak g, files);
#   * every segment that overlaps its window is in protected/, and each is a whole HEVC
#     segment (check_segment.py, ffprobe); frames a starved VM did not deliver are reported;
#   * "Incident saved." is played into the loop (sox stat on what hw:Loopback,1,0 recorded);
#   * readings at rest make no incident.
# Its own waits add up to 480 s (a busy CI host emulates the encoder at a third of this pace).
# hil-case-timeout: 540
set -uo pipefail
HIL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
source "$HIL_DIR/lib.sh"
: "${CASE_DIR:?}" "${AGENT_BIN:?}"

# 2-s segments: the steps and the windows need a few segments, each minutes of emulated encoding less.
HIL_SEGMENT_SECONDS=2
OUT="$CASE_DIR/segments"
STATUS_SOCKET=/tmp/hil-gsensor-$$.sock
MIN_MAX_AMPLITUDE=0.1
mkdir -p "$OUT"

hil_vivid_fresh || { hil_fail "fresh vivid camera at $HIL_VIDEO_DEV"; hil_case_result; }
hil_audio_ready || { hil_fail "snd-aloop card $HIL_AUDIO_CARD is there"; hil_case_result; }
iio=$(hil_accel_iio) || { hil_fail "the lis3dh IIO device is there"; hil_case_result; }
hil_ok "$(cat "$iio/name") at $iio ($(readlink -f "$iio"))"
hil_accel_set 0 0 1000

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
offline:
  enabled: false
sensors:
  accel:
    device: lis3dh
    hz: 10
incident:
  sensitivity: medium
  beforeSeconds: 4
  afterSeconds: 4
EOF

"$AGENT_BIN" record --config "$CONFIG" > "$CASE_DIR/agent.jsonl" 2> "$CASE_DIR/agent.log" &
agent_pid=$!
start=$(hil_now)

reading() { grep -q "g-sensor: reading lis3dh (iio:device" "$CASE_DIR/agent.log"; }
if hil_wait_for 120 reading; then hil_ok "the agent reads the G-sensor after $(hil_since "$start")s: $(grep -o 'g-sensor: reading.*' "$CASE_DIR/agent.log" | head -1)"
else hil_fail "the agent reads the G-sensor within 120 s"; fi
echo "    sampling_frequency: $(cat "$iio/sampling_frequency" 2>&1)"
# Two segments at rest first, so the window has segments before the shock.
if hil_wait_for 120 hil_has_segments "$OUT" 2; then hil_ok "two segments recorded at rest"
else hil_fail "two segments within 120 s"; fi
if ! grep -q "g-sensor: incident" "$CASE_DIR/agent.log"; then hil_ok "no incident at rest"
else hil_fail "no incident at rest: $(grep 'g-sensor: incident' "$CASE_DIR/agent.log" | head -2)"; fi

arecord -q -D "$HIL_AUDIO_CAPTURE" -f S16_LE -r 22050 -c 1 -d 600 "$CASE_DIR/heard.wav" 2> "$CASE_DIR/arecord.log" &
arecord_pid=$!
shock=$(date -u +%s.%N)
hil_accel_set 0 2000 1000
sleep 1
hil_accel_set 0 0 1000
hil_log "shock: 2 g across for 1 s at $(date -u -d "@$shock" +%H:%M:%S.%3N)"

saved() { grep -q "g-sensor: incident saved" "$CASE_DIR/agent.log"; }
spoken_incident() { grep -q "status: Incident saved." "$CASE_DIR/agent.log"; }
if hil_wait_for 180 saved; then hil_ok "incident saved: $(grep -o 'g-sensor: incident saved.*' "$CASE_DIR/agent.log")"
else hil_fail "incident saved within 180 s of the shock"; fi
if hil_wait_for 60 spoken_incident; then hil_ok "\"Incident saved.\" said"
else hil_fail "\"Incident saved.\" said within 60 s"; fi
sleep 4   # the phrase plays out into the loop
kill -INT "$arecord_pid" 2>/dev/null
wait "$arecord_pid"

status_json=$("$AGENT_BIN" status --json --socket "$STATUS_SOCKET" 2> "$CASE_DIR/status.err")
echo "$status_json" > "$CASE_DIR/status.json"
if python3 - "$status_json" "$shock" "$OUT" "$CASE_DIR/window.txt" <<'PY'
import datetime, json, os, sys
status = json.loads(sys.argv[1])["incidents"]
shock = float(sys.argv[2])
assert status["sensor"].startswith("lis3dh (iio:device"), status
assert status["state"] == "watching", status
assert len(status["list"]) == 1, status["list"]
incident = status["list"][0]
t = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
assert incident["state"] == "saved" and incident["impacts"] == 1, incident
assert 1.5 <= incident["peakG"] <= 2.5, incident
# The impact is when the agent's reading thread saw the shock: after it, and as late as a starved
# VM makes the reading (printed below), not a minute late.
assert -0.5 < t(incident["at"]) - shock < 60, (incident["at"], shock)
# 4 s before the impact; each time is put on the wall clock on its own (tens of ms apart on a starved VM).
assert abs(t(incident["at"]) - t(incident["from"]) - 4) < 0.1, incident
assert 4 <= t(incident["to"]) - t(incident["at"]) <= 6, incident
assert incident["files"] and all(f.startswith("protected/") and os.path.exists(os.path.join(sys.argv[3], f)) for f in incident["files"]), incident
with open(sys.argv[4], "w") as out:
    out.write(f"{t(incident['from'])} {t(incident['to'])}\n" + "\n".join(incident["files"]) + "\n")
print(f"    incident {incident['at']} ({t(incident['at']) - shock:.2f} s after the shock was written): {incident['peakG']} g, {incident['from']} to {incident['to']}, {len(incident['files'])} files")
PY
then hil_ok "status --json lists the incident: saved, one impact, 1.5-2.5 g, its window and files"
else hil_fail "status --json lists the incident (got: $status_json)"; fi

# Every protected file is a whole segment (check_segment.py against its line), and the protected
# ones are exactly the segments whose slots overlap the window. A segment's slots run from its
# capturedAt for (frames + droppedFrames) / fps: a starved VM delivers some of them (the agent
# counts the rest as dropped, printed), and a stretch it delivered nothing for has no segment.
protected_ok=1
if [ -s "$CASE_DIR/window.txt" ]; then
    while read -r file; do
        [ -n "$file" ] || continue
        if ! hil_check_segment_with_record "$OUT" "$file" "$CASE_DIR/agent.jsonl" > "$CASE_DIR/check-${file##*/}.log" 2>&1; then
            protected_ok=0
            sed 's/^/      /' "$CASE_DIR/check-${file##*/}.log"
        fi
    done < <(tail -n +2 "$CASE_DIR/window.txt")
    if python3 - "$CASE_DIR/window.txt" "$CASE_DIR/agent.jsonl" <<'PY'
import datetime, json, sys
window = open(sys.argv[1]).read().split("\n")
start, end = (float(x) for x in window[0].split())
# By name: a segment written before the incident was moved into protected/ after its line.
name = lambda path: path.rsplit("/", 1)[-1]
protected = {name(f) for f in window[1:] if f}
t = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
lines = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
spans = {name(l["file"]): (t(l["capturedAt"]), t(l["capturedAt"]) + (l["frames"] + l["droppedFrames"]) / l["fps"], l) for l in lines if "file" in l}
overlapping = {f for f, (b, e, _) in spans.items() if b < end and e > start}
assert overlapping == protected, f"overlapping the window {sorted(overlapping)}, protected {sorted(protected)}"
inside = sorted((spans[f] for f in protected), key=lambda span: span[0])
frames = sum(l["frames"] for _, _, l in inside); dropped = sum(l["droppedFrames"] for _, _, l in inside)
print(f"    {len(inside)} segments protected, {inside[0][0]:.3f} to {inside[-1][1]:.3f} around the window {start:.3f} to {end:.3f}; "
      f"{frames} frames, {dropped} dropped (reported)")
PY
    then :; else protected_ok=0; fi
else protected_ok=0; fi
if [ "$protected_ok" = 1 ]; then hil_ok "the protected segments are whole HEVC segments (ffprobe), exactly those whose slots overlap the incident's window"
else hil_fail "the protected segments are whole and are those that overlap the window"; fi

sox_stat "$CASE_DIR/heard.wav" > "$CASE_DIR/sox-heard.txt"
max=$(stat_figure "$CASE_DIR/sox-heard.txt" "Maximum amplitude")
if at_least "$max" "$MIN_MAX_AMPLITUDE"; then hil_ok "the phrase was played into the loop: max amplitude $max"
else hil_fail "the phrase was played into the loop: max amplitude >= $MIN_MAX_AMPLITUDE (got '$max')"; fi

kill -TERM "$agent_pid"
wait "$agent_pid"
rc=$?
if [ "$rc" -eq 0 ]; then hil_ok "agent exit 0 on SIGTERM"; else hil_fail "agent exit 0 on SIGTERM (got $rc)"; fi
grep -E "g-sensor|incident" "$CASE_DIR/agent.log" | sed 's/^/    agent: /' | head -20

hil_case_result
