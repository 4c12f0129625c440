#!/usr/bin/env bash
# libFuzzer on the guidance server's parsers of what comes from outside, each a target of the
# `guidance-fuzz` program (fuzz/Harness):
#
#   messages  client messages, text and binary, through one session's state machine (hello,
#             segment headers, chunks, verified segments, each then judged against what its MP4
#             says), the machine's promises checked after each message
#   answers   a model service's response body: the answer's JSON, Gemini's and OpenAI's envelopes,
#             Gemini's RetryInfo and the Retry-After header
#   segments  a segment's bytes read as the server reads them: its MP4 boxes (SegmentVideo.inspect,
#             from memory), then its first two frames decoded at full size
#   pairing   pairing's and the owners' outside bytes: form bodies, payment webhooks (signature and
#             event), access tokens, typed codes, products
#   gpsd      what the agent reads from gpsd's port: the stream cut into lines, each line's JSON,
#             every number of a fix checked in range (HAL's GpsdReport, the agent's GPSTrack)
#   iio       what an IIO driver tells the agent of its buffered device: scan element types and
#             indexes, and the records read from /dev/iio:deviceN (HAL's IIOScanType, IIOScanLayout)
#   mjpeg     what a USB camera sends as MJPEG: any bytes as one frame of a 64x48 stream (HAL's
#             MJPEGDecoder, libavcodec's mjpeg decoder and libswscale behind it)
#   smtp      what the mail relay answers the server: replies cut from bytes in any pieces, each
#             bounded (the server's SMTPReplyParser)
#
#     bash bench/fuzz.sh TARGET SECONDS        # TARGET: messages|answers|segments|pairing|gpsd|iio|mjpeg|smtp|all (each in turn)
#     .build-fuzz/debug/guidance-fuzz TARGET CRASH_FILE           # one input again, sanitized
#     swift build --product guidance-fuzz && .build/debug/guidance-fuzz TARGET fuzz/corpus/TARGET fuzz/regressions/TARGET
#                                              # without sanitizers: replays files or folders
#
# The build: the package's own manifest, with GUIDANCE_FUZZ=1, compiles GuidanceProtocol, UTC,
# GuidanceServer, CSegmentVideo and the harness with -sanitize=fuzzer,address (C:
# -fsanitize=fuzzer-no-link,address) and every other module (NIO, Hummingbird, swift-crypto,
# SQLite, ...) as in a normal debug build, in .build-fuzz. Of the ways weighed it builds fastest
# and cleanest: only the code under test is instrumented, so coverage counts only it and the
# dependencies build at normal speed (from scratch, 2 min 48 s on this machine's 2 cores; after a
# change to GuidanceServer, about 30 s); nothing is copied or stubbed; and without the variable the
# same target builds in the normal build as a program that replays inputs, so it cannot rot. A
# separate package under fuzz/ could not pass flags to the root package's targets, only to all of
# them (-Xswiftc), instrumenting every dependency too.
# The harness has its own `main` (SwiftPM renames an executable's entry point) and hands its
# callback to LLVMFuzzerRunDriver. libavformat and Foundation's JSON parser are the system's, not
# instrumented: their inner branches do not guide the fuzzer (the dictionaries fuzz/*.dict help).
#
# Each run starts from a copy of fuzz/corpus/TARGET (and fuzz/regressions/TARGET: inputs that once
# broke a promise, checked again) in .build-fuzz/runs/TARGET-TIME/ (git-ignored);
# new inputs, the log and crashes (crash-*, leak-*, oom-*, timeout-*) stay there. Prints
# executions, exec/s, coverage (cov: edges, ft: features), corpus size and crashes; exits 1 if a
# target crashed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() { echo "usage: bash bench/fuzz.sh messages|answers|segments|pairing|gpsd|iio|mjpeg|smtp|all SECONDS" >&2; exit 64; }
[ $# -eq 2 ] || usage
case $1 in messages|answers|segments|pairing|gpsd|iio|mjpeg|smtp) TARGETS=("$1") ;; all) TARGETS=(messages answers segments pairing gpsd iio mjpeg smtp) ;; *) usage ;; esac
[[ $2 =~ ^[0-9]+$ ]] && [ "$2" -gt 0 ] || usage
SECONDS_EACH=$2
BUILD=.build-fuzz
BIN=$BUILD/debug/guidance-fuzz

echo "=== build (GUIDANCE_FUZZ=1, $BUILD)" >&2
start=$SECONDS
GUIDANCE_FUZZ=1 swift build --force-resolved-versions --build-path "$BUILD" --manifest-cache local \
    --product guidance-fuzz -Xswiftc -use-ld=lld >&2
echo "built in $((SECONDS - start)) s" >&2

failed=0
summary=()
for target in "${TARGETS[@]}"; do
    run=$BUILD/runs/$target-$(date -u +%Y%m%dT%H%M%SZ)
    mkdir -p "$run/corpus" "$run/crashes" "$run/tmp"
    cp fuzz/corpus/"$target"/* "$run/corpus/"
    # Inputs that once broke a promise (fuzz/regressions/TARGET): each run checks them again.
    if [ -d fuzz/regressions/"$target" ]; then cp fuzz/regressions/"$target"/* "$run/corpus/"; fi
    seeds=$(find "$run/corpus" -type f | wc -l)
    echo "=== $target: $SECONDS_EACH s from $seeds seeds, in $run" >&2
    # The Swift runtime's backtracer would catch a trap before libFuzzer saves the input.
    # -rss_limit_mb: libFuzzer's default, said out loud; an input that makes the reader
    # allocate more is a finding (oom-*).
    # Inputs as long as the seeds' longest (libFuzzer's guess), but a model's reply may pass the
    # 64 KiB a guidance message may take (the server reads up to 1 MiB).
    lengths=()
    [ "$target" = answers ] && lengths=(-max_len=131072)
    status=0
    began=$SECONDS
    SWIFT_BACKTRACE=enable=no TMPDIR="$PWD/$run/tmp" "$BIN" "$target" \
        -max_total_time="$SECONDS_EACH" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 "${lengths[@]}" \
        -dict=fuzz/"$target".dict -artifact_prefix="$run/crashes/" "$run/corpus" \
        > "$run/log" 2>&1 || status=$?
    took=$((SECONDS - began))
    last=$(grep -E '^#[0-9]+' "$run/log" | tail -1)
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/log")
    persec=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$run/log")
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$last")
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$run/log")
    # libFuzzer's own count of the inputs it keeps (the folder also holds ones it replaced).
    corpus=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<< "$last")
    crashes=$(find "$run/crashes" -type f | wc -l)
    line=$(printf '%-9s %6s s  %10s execs  %6s exec/s  cov %5s  ft %6s  corpus %10s  crashes %s  peak RSS %s MB' \
        "$target" "$took" "${executions:-?}" "${persec:-?}" "${cov:-?}" "${ft:-?}" "$corpus" "$crashes" "${rss:-?}")
    echo "$line"
    summary+=("$line")
    if [ "$crashes" -gt 0 ] || [ "$status" -ne 0 ]; then
        failed=1
        echo "--- $target: libFuzzer exited $status; the end of $run/log:" >&2
        grep -v '^#[0-9]' "$run/log" | tail -40 >&2
        for crash in "$run/crashes"/*; do
            [ -f "$crash" ] && echo "crash: $crash   (again: $BIN $target $crash)"
        done
    fi
done

if [ ${#TARGETS[@]} -gt 1 ]; then
    echo "=== summary" >&2
    printf '%s\n' "${summary[@]}"
fi
exit "$failed"
