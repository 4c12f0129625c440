#!/usr/bin/env bash
# Both streams in the VM suite's VM (QEMU without KVM, vivid, Tests/HIL): case 10-vivid-record at
# each size pair of PAIRS, one VM boot each, and what each segment got: evidence and guidance
# frames, and the frames dropped (what the emulated machine could not keep up with). Run as root
# on an otherwise idle host; the figures go to BENCHMARKS.md ("Two streams").
#
#     sudo bash bench/two_streams_vm.sh                     # AGENT_BIN: the release build by default
#     sudo PAIRS="1280x720@10,320x180@5" bash bench/two_streams_vm.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export AGENT_BIN=${AGENT_BIN:-$PWD/.build-release/release/dashcam-agent}
export SERVER_BIN=${SERVER_BIN:-$PWD/.build/debug/guidance-server}
PAIRS=${PAIRS:-"640x360@10,320x180@5 640x360@30,640x360@10 1280x720@10,640x360@10 1280x720@30,640x360@10 1920x1080@30,640x360@10"}
echo "host: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); agent $AGENT_BIN"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for pair in $PAIRS; do
    evidence=${pair%,*} copy=${pair#*,}
    if HIL_TWO_STREAMS="$evidence $copy" HIL_CASES="10-*" HIL_SKIP_INSTALL=1 bash Tests/HIL/run.sh > "$log" 2>&1; then
        result=pass
    else
        result="fail (the end of its output: $(tail -3 "$log" | tr "\n" " "))"
    fi
    echo "== evidence $evidence, copy $copy: $result"
    grep -E "^    segment [0-9]+: evidence|agent exited" .build-hil/latest/cases/10-vivid-record/case.log | sed 's/^ */   /' || true
done
