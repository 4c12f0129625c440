#!/usr/bin/env bash
# Road to voice in the VM, on real drivers: vivid's brightness turned down while the agent records
# it with no server, to the first sample of the "too dark" warning that snd-aloop carries
# (Tests/HIL/cases/40-vivid-dark.sh measures one per run). Boots the VM RUNS times and prints
# each delay, then p50 / p95.
#
#     swift build --product dashcam-agent
#     sudo RUNS=5 bash bench/road_to_voice_vm.sh     # AGENT_BIN as Tests/HIL/run.sh takes it
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${RUNS:-5}
figures=()
for run in $(seq "$RUNS"); do
    HIL_CASES="40-*" bash Tests/HIL/run.sh > /dev/null 2>&1 || echo "run $run: the case failed (see .build-hil/latest)" >&2
    file=$(find -L .build-hil/latest/ -name road-to-voice-dark.txt | head -1)
    if [ -n "$file" ]; then
        figures+=("$(cat "$file")")
        echo "run $run: $(cat "$file") s"
    fi
done
[ "${#figures[@]}" -gt 0 ] || { echo "no figure" >&2; exit 1; }
python3 - "${figures[@]}" <<'PY'
import sys
values = sorted(float(v) * 1000 for v in sys.argv[1:])
pick = lambda p: values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]
print(f"dark (VM, vivid, snd-aloop): n={len(values)} p50 {pick(50):.0f} ms p95 {pick(95):.0f} ms max {values[-1]:.0f} ms")
PY
