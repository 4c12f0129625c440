#!/usr/bin/env bash
# vivid as a webcam -> `dashcam-agent record --segments 2` -> two valid HEVC segments.
# Each segment: hevc/hvc1, fps*5 frames, 5.0 s within a frame, one keyframe (the first),
# moov before mdat; and its JSON line on stdout agrees with the file.
set -uo pipefail
HIL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
source "$HIL_DIR/lib.sh"
: "${CASE_DIR:?}" "${AGENT_BIN:?}"

SEGMENTS=2
OUT="$CASE_DIR/segments"
CONFIG="$CASE_DIR/config.yaml"
mkdir -p "$OUT"

hil_vivid_fresh || { hil_fail "fresh vivid camera at $HIL_VIDEO_DEV"; hil_case_result; }
v4l2-ctl -d "$HIL_VIDEO_DEV" --info --get-input --list-formats > "$CASE_DIR/v4l2-info.txt" 2>&1
hil_write_config "$CONFIG" "$OUT"

# Recording 2 x 5 s takes 10 s of camera time; allow for start-up and the encoder under TCG.
hil_log "recording: $AGENT_BIN record --config $CONFIG --out $OUT --segments $SEGMENTS"
start=$(hil_now)
timeout -k 5 120 "$AGENT_BIN" record --config "$CONFIG" --out "$OUT" --segments "$SEGMENTS" \
    > "$CASE_DIR/agent.jsonl" 2> "$CASE_DIR/agent.log"
rc=$?
hil_log "agent exited $rc after $(hil_since "$start") s"
if [ "$rc" -eq 0 ]; then hil_ok "agent exit 0"; else hil_fail "agent exit 0 (got $rc; 124 = timed out)"; fi
sed 's/^/    stderr: /' "$CASE_DIR/agent.log" | tail -40
sed 's/^/    stdout: /' "$CASE_DIR/agent.jsonl"

mapfile -t segs < <(hil_segments "$OUT")
if [ "${#segs[@]}" -eq "$SEGMENTS" ]; then hil_ok "$SEGMENTS segments written: ${segs[*]}"
else hil_fail "$SEGMENTS segments written (got ${#segs[@]}: ${segs[*]})"; fi
left=$(hil_leftovers "$OUT")
if [ -z "$left" ]; then hil_ok "no temp files left"; else hil_fail "no temp files left (found: $left)"; fi
lines=$(grep -c '^{' "$CASE_DIR/agent.jsonl")
if [ "$lines" -eq "${#segs[@]}" ]; then hil_ok "one JSON line per segment ($lines)"
else hil_fail "one JSON line per segment (got $lines lines for ${#segs[@]} segments)"; fi

for s in "${segs[@]}"; do
    # --segments N writes N full segments: each must be complete and exact.
    # --exact: fps*5 frames even if the record admits fewer (its `complete` would allow that).
    rec=$(hil_record_for_seq "$CASE_DIR/agent.jsonl" "$(hil_segment_seq "$s")")
    [ -n "$rec" ] || rec='{}'
    summary=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("complete=%s endReason=%s frames=%s droppedFrames=%s" % (r.get("complete"), r.get("endReason"), r.get("frames"), r.get("droppedFrames")))' "$rec")
    if [[ $summary == complete=True* ]]; then hil_ok "$s: record says complete ($summary)"
    else hil_fail "$s: record says complete (got $summary)"; fi
    if hil_check_segment_with_record "$OUT" "$s" "$CASE_DIR/agent.jsonl" --exact; then hil_ok "$s valid"
    else hil_fail "$s valid (see checks above)"; fi
done

hil_case_result
