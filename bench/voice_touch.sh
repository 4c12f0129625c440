#!/usr/bin/env bash
# Voice and touch latencies on the simulated hardware (QEMU without KVM, so slower than a board):
#   guidance received -> first audio sample handed to ALSA (snd-aloop), and
#   clear received -> the GPIO line set (gpio-sim).
# Runs the HIL case 30-voice-touch with ROUNDS rounds of seven 1-second segments (Korean, clear,
# clear, clear, urgent English, clear, clear), then reads the agent's debug log of every latency.
#
#     sudo bash bench/voice_touch.sh [ROUNDS]          # default 10: 20 utterances, 50 pulses
#     bash bench/voice_touch.sh --native [ROUNDS]      # this machine, release build, speech to
#                                                      # WAV files played in real time, pulses logged
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
NATIVE=0
if [ "${1:-}" = --native ]; then NATIVE=1; shift; fi
ROUNDS="${1:-10}"

if [ "$NATIVE" = 1 ]; then
    BIN="${BIN:-.build/release}"   # where release builds of both programs are
    if [ "$BIN" = .build/release ]; then
        swift build -c release --product dashcam-agent >/dev/null
        swift build -c release --product guidance-server >/dev/null
    fi
    work=$(mktemp -d)
    trap 'kill "${server_pid:-}" 2>/dev/null; rm -rf "$work"' EXIT
    printf 'bench-token-1: bench-car\n' > "$work/tokens.yaml"
    chmod 600 "$work/tokens.yaml"
    printf 'bench-token-1\n' > "$work/token"; chmod 600 "$work/token"
    for _ in $(seq "$ROUNDS"); do
        printf -- '- text: "전방에 보행자가 있습니다. 속도를 줄이세요."\n  lang: ko-KR\n'
        printf -- '- clear: true\n- clear: true\n- clear: true\n'
        printf -- '- text: "Brake now."\n  lang: en-US\n  priority: urgent\n'
        printf -- '- clear: true\n- clear: true\n'
    done > "$work/script.yaml"
    printf 'server:\n  host: 127.0.0.1\n  port: 18181\n  tokensFile: %s/tokens.yaml\nanalyzer:\n  kind: scripted\n  scriptFile: %s/script.yaml\nledger: sqlite:%s/usage.sqlite\n' \
        "$work" "$work" "$work" > "$work/server.yaml"
    printf 'device:\n  locale: ko-KR\ncamera:\n  source: test-pattern\n  width: 320\n  height: 180\n  fps: 10\nencoder:\n  preference: [libx265]\n  segmentSeconds: 1\n' > "$work/agent.yaml"
    printf 'recording:\n  dir: %s/segments\nuplink:\n  url: ws://127.0.0.1:18181/v1/stream\n  allowInsecure: true\n  tokenFile: %s/token\n' "$work" "$work" >> "$work/agent.yaml"
    printf 'speech:\n  sink: wav:%s/speech\nhaptics:\n  required: false\nstatus:\n  socket: %s/status.sock\nlog:\n  level: debug\n' "$work" "$work" >> "$work/agent.yaml"
    "$BIN/guidance-server" --config "$work/server.yaml" > "$work/server.log" 2>&1 &
    server_pid=$!
    sleep 1
    "$BIN/dashcam-agent" record --config "$work/agent.yaml" --segments $((ROUNDS * 7 + 1)) > /dev/null 2> "$work/agent.log"
    LOG="$work/agent.log"
    SINK=wav
else
    swift build --build-tests >/dev/null
    HIL_CASES=30-voice-touch HIL_VOICE_TOUCH_ROUNDS="$ROUNDS" HIL_SEGMENT_SECONDS=1 HIL_CASE_TIMEOUT=600 \
        AGENT_BIN="$PWD/.build/debug/dashcam-agent" bash Tests/HIL/run.sh | tail -3
    LOG=.build-hil/latest/cases/30-voice-touch/agent.log
    SINK=alsa
fi

# summary NAME [DECIMALS]: count and percentiles of the numbers on stdin (ms), DECIMALS places (1).
summary() {
    sort -n | awk -v name="$1" -v d="${2:-1}" '{ v[NR] = $1 } END {
        if (NR == 0) { print name ": no samples"; exit 1 }
        i50 = int(0.5 * (NR - 1)) + 1; i90 = int(0.9 * (NR - 1) + 0.5) + 1; i99 = int(0.99 * (NR - 1) + 0.5) + 1
        f = "%." d "f"
        printf "%s: n=%d min " f " p50 " f " p90 " f " p99 " f " max " f " ms\n", name, NR, v[1], v[i50], v[i90], v[i99], v[NR] }'
}
grep -o "first sample handed to $SINK:[^ ]* [0-9.]* ms" "$LOG" | awk '{ print $(NF-1) }' | summary "guidance -> first sample to $SINK"
# The first edge is set on the thread that takes the message: microseconds, so three places.
grep -o 'haptics: clear line set [0-9.]* ms' "$LOG" | awk '{ print $(NF-1) }' | summary "clear -> line set" 3
grep -o 'haptics: alert line set [0-9.]* ms' "$LOG" | awk '{ print $(NF-1) }' | summary "urgent -> line set" 3
