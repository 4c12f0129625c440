#!/usr/bin/env bash
# The wall clock stepped while recording, as on a board without a clock battery when NTP or a GPS
# fix sets it after boot: an hour forward, then two hours back (`date -s` in the VM).
#   * the agent logs each step; the first segment after each says so in its JSON line
#     (`clock.steppedSeconds`) and is named by the new time (a new timeline), the others a
#     segment's length apart (2 s here);
#   * `.recording-order` lists the segments in the order they were recorded, whatever their names
#     say (retention deletes by it: RecordingOrderTests);
#   * `protect --last 10s` after the step back keeps only segments recorded after that step, none
#     of those named an hour ahead;
#   * the segments on both sides of each step, and the protected ones, are whole
#     (check_segment.py), and SIGTERM exits 0.
# Waits are timed by /proc/uptime: the wall clock is what this case moves. The clock is put back
# where it would have been at the end.
# Its own waits add up to 600 s, and its segment checks are minutes of emulated ffprobe: beside two
# CPU hogs it took 473 s. The bound catches a hang, not a slow host.
# hil-case-timeout: 900
set -uo pipefail
HIL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
source "$HIL_DIR/lib.sh"
: "${CASE_DIR:?}" "${AGENT_BIN:?}"

# 2-s segments: the steps and the windows need a few segments, each minutes of emulated encoding less.
HIL_SEGMENT_SECONDS=2
OUT="$CASE_DIR/segments"
STATUS_SOCKET=/tmp/hil-clock-$$.sock
mkdir -p "$OUT"
uptime_s() { cut -d' ' -f1 /proc/uptime; }
# mono_wait SECONDS CMD...: CMD until it succeeds, at most SECONDS of uptime.
mono_wait() {
    local until
    until=$(awk -v a="$(uptime_s)" -v b="$1" 'BEGIN { print a + b }'); shift
    while ! "$@"; do
        awk -v a="$(uptime_s)" -v b="$until" 'BEGIN { exit !(a >= b) }' && return 1
        sleep 0.25
    done
}
lines() { local n; n=$(grep -c '"seq"' "$CASE_DIR/agent.jsonl" 2>/dev/null); echo "${n:-0}"; }
at_least_lines() { [ "$(lines)" -ge "$1" ]; }
logged() { grep -q "$1" "$CASE_DIR/agent.log"; }
net_step=0
step_clock() {   # step_clock SECONDS
    date -u -s "@$(( $(date -u +%s) + $1 ))" > /dev/null
    net_step=$(( net_step + $1 ))
}

hil_vivid_fresh || { hil_fail "fresh vivid camera at $HIL_VIDEO_DEV"; hil_case_result; }
CONFIG="$CASE_DIR/config.yaml"
hil_write_config "$CONFIG" "$OUT"
cat >> "$CONFIG" <<EOF
status:
  socket: $STATUS_SOCKET
offline:
  enabled: false
speech:
  sink: wav:$CASE_DIR/speech
EOF

"$AGENT_BIN" record --config "$CONFIG" > "$CASE_DIR/agent.jsonl" 2> "$CASE_DIR/agent.log" &
agent_pid=$!
if mono_wait 180 at_least_lines 2; then hil_ok "two segments before any step"
else hil_fail "two segments within 180 s"; fi

step_clock 3600
hil_log "clock stepped an hour forward"
if mono_wait 30 logged "clock: stepped forward by 3[56][0-9][0-9]\."; then hil_ok "$(grep -o 'clock: stepped forward.*' "$CASE_DIR/agent.log" | head -1)"
else hil_fail "the forward step logged within 30 s"; fi
before=$(lines)
if mono_wait 120 at_least_lines $(( before + 2 )); then hil_ok "two segments after it"
else hil_fail "two segments after the forward step"; fi

step_clock -7200
hil_log "clock stepped two hours back"
if mono_wait 30 logged "clock: stepped back by 7[12][0-9][0-9]\."; then hil_ok "$(grep -o 'clock: stepped back.*' "$CASE_DIR/agent.log" | head -1)"
else hil_fail "the backward step logged within 30 s"; fi
before=$(lines)
if mono_wait 120 at_least_lines $(( before + 2 )); then hil_ok "two segments after it"
else hil_fail "two segments after the backward step"; fi
protect_json=$("$AGENT_BIN" protect --last 10s --json --socket "$STATUS_SOCKET" 2> "$CASE_DIR/protect.err")
echo "$protect_json" > "$CASE_DIR/protect.json"
# A starved VM may not have written any of the last 10 s yet: the reply then says the range is
# pending, and its segments are protected as they are written. Judged on the files.
protected_files() { (cd "$OUT" && find protected -name '*.mp4' 2>/dev/null | sort); }
has_protected() { [ -n "$(protected_files)" ]; }
mono_wait 120 has_protected || hil_fail "a segment of the last 10 s protected within 120 s (reply: $protect_json)"
status_json=$("$AGENT_BIN" status --json --socket "$STATUS_SOCKET" 2> "$CASE_DIR/status.err")
echo "$status_json" > "$CASE_DIR/status.json"

kill -TERM "$agent_pid"
wait "$agent_pid"
rc=$?
step_clock $(( -net_step ))
hil_log "clock put back (net step undone)"
if [ "$rc" -eq 0 ]; then hil_ok "agent exit 0 on SIGTERM"; else hil_fail "agent exit 0 on SIGTERM (got $rc)"; fi

if python3 - "$CASE_DIR/agent.jsonl" "$OUT" "$protect_json" "$status_json" "$HIL_SEGMENT_SECONDS" "$(protected_files)" <<'PY'
import datetime, json, os, sys
length = float(sys.argv[5])
records = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
seqs = [r["seq"] for r in records]
assert seqs == sorted(seqs) and len(seqs) >= 6, seqs
t = lambda r: datetime.datetime.fromisoformat(r["capturedAt"].replace("Z", "+00:00")).timestamp()
steps = [(r["seq"], r["clock"].get("steppedSeconds")) for r in records if r["clock"].get("steppedSeconds") is not None]
assert len(steps) == 2, steps
(fwd_seq, fwd), (back_seq, back) = steps
assert 3590 <= fwd <= 3610 and -7210 <= back <= -7190, steps
# Consecutive segments are a whole number of segment lengths apart on the clock they were dated
# by (plus the step between them): a starved VM may deliver no frame for a segment's slots, and
# then no segment is made for them.
skipped = 0
for previous, current in zip(records, records[1:]):
    gap = t(current) - t(previous) - (current["clock"].get("steppedSeconds") or 0)
    if current["endReason"] == "complete" and previous["endReason"] == "complete":
        slots = round(gap / length)
        assert slots >= 1 and abs(gap - slots * length) < 1.5, (previous["seq"], current["seq"], gap, length)
        skipped += slots - 1
# Names carry the times that dated them.
for r in records:
    assert r["file"].split("/")[-1].split("-", 1)[1].startswith(datetime.datetime.utcfromtimestamp(t(r)).strftime("%Y%m%dT%H%M%S")), r["file"]
# The order log: recording order, whatever the names say.
order = [l for l in open(os.path.join(sys.argv[2], ".recording-order")).read().split("\n") if l]
names = [r["file"].split("/")[-1] for r in records]
assert order == names, (order, names)
assert sorted(names, key=lambda n: n.split("-", 1)[1]) != names, "the names' times are out of order, as the steps made them"
# protect --last 10s after the step back: the newest recorded, not the ones named an hour ahead;
# in the reply, or (written after it: the reply's pendingUntilMs) in protected/.
protection = json.loads(sys.argv[3])
kept = [p.split("/")[-1] for p in protection.get("protected", [])]
assert kept or protection.get("pendingUntilMs"), protection
kept = sorted(set(kept) | {p.split("/")[-1] for p in sys.argv[6].split("\n") if p})
assert kept, protection
# (every one recorded after the step back: none named an hour ahead)
assert all(int(k.split("-", 1)[0]) >= back_seq for k in kept), (kept, back_seq)
status = json.loads(sys.argv[4])["clock"]
assert status["steps"] == 2 and -7210 <= status["lastStepSeconds"] <= -7190, status
print(f"    {len(records)} segments; steps at seq {fwd_seq} ({fwd:+.1f} s) and {back_seq} ({back:+.1f} s); protected {kept}; "
      f"{sum(r['droppedFrames'] for r in records)} frames dropped, {skipped} segment slot(s) with no frame at all")
PY
then hil_ok "steps in the JSON lines, names on the new timeline, recording order kept, protect by the new clock, status counts 2 steps"
else hil_fail "the segments' clock, names, order and protection after the steps"; fi

# The segments a step could have broken: the last before each step and the first after it, and
# the protected ones (case 10 checks a recording's every segment; here each check is a minute of
# emulation on a busy host).
around_steps() {
    python3 - "$CASE_DIR/agent.jsonl" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and '"seq"' in l]
firsts = {r["seq"] for r in records if r.get("clock", {}).get("steppedSeconds") is not None}
for r in records:
    if r.get("file") and (r["seq"] in firsts or r["seq"] + 1 in firsts):
        print(r["file"].split("/")[-1])
PY
}
wanted=$(around_steps)
bad=0 checked=0
while read -r f; do
    case "$f" in protected/*) ;; *) grep -qxF "${f##*/}" <<< "$wanted" || continue ;; esac
    checked=$((checked + 1))
    hil_check_segment_with_record "$OUT" "$f" "$CASE_DIR/agent.jsonl" > "$CASE_DIR/check-${f##*/}.log" 2>&1 || { bad=$((bad + 1)); sed 's/^/      /' "$CASE_DIR/check-${f##*/}.log"; }
done < <(hil_segments "$OUT"; cd "$OUT" && find protected -name '*.mp4' 2>/dev/null | sort)
if [ "$bad" -eq 0 ] && [ "$checked" -ge 4 ]; then hil_ok "the $checked segments on both sides of each step and the protected ones are whole (check_segment.py)"
else hil_fail "$bad of $checked segment(s) around the steps failed the check (at least 4 expected)"; fi
grep -E "clock:" "$CASE_DIR/agent.log" | sed 's/^/    agent: /' | head -10

hil_case_result
