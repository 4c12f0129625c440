#!/bin/bash
# The boot test's checks, inside the VM (systemd booted it; run by boot-test-checks.service).
# The kernel command line says which boot this is (boot-test.phase=N). Each check prints
# "boot-test: ok ..." or "boot-test: FAIL ..." on the console; the host counts them.
#   phase 1: the service after boot, its journal and segments; the watchdog; the camera unbound
#            and bound again; a config error; reload; stop within 2 s; then recording for the
#            power cut the host makes (it kills the VM on "ready for the power cut").
#   phase 2: the next boot after the power cut cleans up and records; apt remove keeps the
#            recordings, a reinstall keeps the changed conffile, apt purge removes them.
set -uo pipefail
UNIT=dashcam-agent.service
REC=/var/lib/dashcam-agent/recordings
PHASE=$(sed -n 's/.*boot-test\.phase=\([0-9]*\).*/\1/p' /proc/cmdline)

ok() { echo "boot-test: ok: $*"; }
fail() { echo "boot-test: FAIL: $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }
# wait_for SECONDS CMD...: CMD every 0.5 s until it succeeds; 1 if SECONDS pass first.
wait_for() {
    local end=$((SECONDS + $1)); shift
    until "$@"; do [ "$SECONDS" -ge "$end" ] && return 1; sleep 0.5; done
}
prop() { systemctl show -P "$1" "$UNIT"; }
active() { [ "$(systemctl is-active "$UNIT")" = active ]; }
segments() { find "$REC" -path "$REC/protected" -prune -o -name '*.mp4' -print 2>/dev/null | wc -l; }
more_segments_than() { [ "$(segments)" -gt "$1" ]; }
# Hidden temporary files; .recording-order (the order segments were recorded in) is kept on purpose.
leftovers() { find "$REC" -name '.*' ! -name .recording-order -type f 2>/dev/null | wc -l; }
journal() { journalctl -b -u "$UNIT" --no-pager -o cat; }

echo "boot-test: phase $PHASE, $(uname -r), systemd $(systemctl --version | head -1 | cut -d' ' -f2), up $(cut -d' ' -f1 /proc/uptime) s"

if [ "$PHASE" = 1 ]; then
    check "/dev/dashcam-camera made by the package's udev rule ($(readlink /dev/dashcam-camera))" test -c /dev/dashcam-camera
    check "the unit is active (running) after boot" wait_for 180 active
    systemctl status "$UNIT" --no-pager | head -12 | sed 's/^/    /'
    # Type=notify: active means READY=1 came, and the agent sends it once frames flow.
    check "READY=1 only after frames flowed: StatusText '$(prop StatusText)'" \
        bash -c "systemctl show -P StatusText $UNIT | grep -q '^recording '"
    check "segments appear in $REC" wait_for 120 more_segments_than 0
    check "the agent's log is in the journal" bash -c "journalctl -b -u $UNIT -o cat | grep -q 'encoder: libx265'"
    echo "boot-test: booted and recording $(cut -d' ' -f1 /proc/uptime) s after power-on"
    # (systemd-analyze waits for the boot to finish, which this unit, still running, holds up.)
    at() { awk -v us="$(systemctl show -P ActiveEnterTimestampMonotonic "$1")" 'BEGIN { printf "%.1f", us / 1e6 }'; }
    echo "boot-test: after power-on: kernel to multi-user.target $(at multi-user.target) s, $UNIT active (READY=1) $(at "$UNIT") s"

    # Frozen: the watchdog (WatchdogSec=30s) kills it, systemd starts it again.
    pid=$(prop MainPID); restarts=$(prop NRestarts); before=$(segments)
    kill -STOP "$pid"
    new_pid() { local p; p=$(prop MainPID); [ "$p" != 0 ] && [ "$p" != "$pid" ] && active; }
    check "SIGSTOP: the watchdog killed the frozen agent and systemd started it again" wait_for 120 new_pid
    check "restarts counted ($restarts → $(prop NRestarts))" test "$(prop NRestarts)" -gt "$restarts"
    check "recording resumed after the watchdog restart" wait_for 120 more_segments_than "$before"
    journalctl -b -u "$UNIT" --no-pager | grep -iE "watchdog|SIGABRT" | tail -3 | sed 's/^/    /'

    # The camera unbound and bound again: the agent reopens it, the unit is not restarted.
    pid=$(prop MainPID); restarts=$(prop NRestarts)
    echo vivid.0 > /sys/bus/platform/drivers/vivid/unbind
    sleep 3
    echo vivid.0 > /sys/bus/platform/drivers/vivid/bind
    udevadm settle -t 10
    check "camera unbound and bound: 'camera back' logged" wait_for 60 bash -c "journalctl -b -u $UNIT -o cat | grep -q 'camera back'"
    check "camera unbound and bound: same process, no restart" test "$(prop MainPID)" = "$pid" -a "$(prop NRestarts)" = "$restarts"

    # A config error stops the unit (exit 78) without a restart loop.
    cp /etc/dashcam-agent/agent.yaml /root/agent.yaml.good
    printf '\ncamera:\n  zoom: 2\n' >> /etc/dashcam-agent/agent.yaml
    systemctl restart "$UNIT"
    failed() { [ "$(systemctl is-active "$UNIT")" = failed ]; }
    check "config error: the unit failed" wait_for 60 failed
    check "config error: exit status 78 ($(prop ExecMainStatus))" test "$(prop ExecMainStatus)" = 78
    # (A manual restart starts NRestarts again from 0.) Four RestartSec=3s periods later:
    restarts=$(prop NRestarts)
    sleep 12
    check "config error: no restart loop (still failed, NRestarts $restarts → $(prop NRestarts))" \
        bash -c "[ \"\$(systemctl is-active $UNIT)\" = failed ] && [ \"\$(systemctl show -P NRestarts $UNIT)\" = $restarts ]"
    journalctl -b -u "$UNIT" -o cat --no-pager | grep -E "zoom" | tail -1 | sed 's/^/    /'
    cp /root/agent.yaml.good /etc/dashcam-agent/agent.yaml
    systemctl start "$UNIT"
    check "config mended: started again" wait_for 180 active

    # systemctl reload (SIGHUP) applies a safe key.
    sed -i 's/^  locale: en-US$/  locale: en-US\nlog:\n  level: debug/' /etc/dashcam-agent/agent.yaml
    systemctl reload "$UNIT"
    check "reload: log.level applied" wait_for 30 bash -c "journalctl -b -u $UNIT -o cat | grep -q 'config: reloaded; applied log.level'"

    # systemctl stop closes the segment in progress and the agent exits by itself, before the
    # unit's TimeoutStopSec would kill it. How long that takes is a figure (bench/stop.py measures
    # the 2-s goal), not a check: an emulated machine shared with other work may take longer.
    wait_for 60 more_segments_than "$(segments)"
    sleep 2
    before=$(segments)
    start=$(date +%s%N)
    systemctl stop "$UNIT"
    took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "boot-test: systemctl stop took ${took_ms} ms"
    check "stop: the agent exited by itself, not killed at TimeoutStopSec (Result=$(prop Result))" \
        test "$(prop Result)" = success
    check "stop: the segment in progress was written ($before → $(segments))" more_segments_than "$before"
    check "stop: exit status 0 ($(prop ExecMainStatus))" test "$(prop ExecMainStatus)" = 0

    # Recording again, then the power is cut (the host kills the VM) in the middle of a segment.
    systemctl start "$UNIT"
    wait_for 180 active
    wait_for 120 more_segments_than "$(segments)"
    # The cut itself rarely lands in the milliseconds a segment takes to write, so a write cut
    # short is put beside the segments as it would be left: half a segment under the temporary
    # name the agent writes to before it renames.
    newest=$(find "$REC" -name '[0-9]*.mp4' | sort | tail -1)
    head -c "$(( $(stat -c %s "$newest") / 2 ))" "$newest" > "$(dirname "$newest")/.$(basename "$newest").partial"
    sync
    echo "boot-test: whole segments before the power cut: $(segments), and one write cut short"
    sleep 2.5
    echo "boot-test: phase 1 done"
    echo "boot-test: ready for the power cut"
    sleep infinity
fi

if [ "$PHASE" = 2 ]; then
    check "after the power cut: the unit is active again" wait_for 180 active
    check "after the power cut: no temporary file left" wait_for 30 test "$(leftovers)" = 0
    check "after the power cut: the agent says it removed the write cut short" \
        bash -c "journalctl -b -u $UNIT -o cat | grep -q 'removed 1 temporary file'"
    n=$(segments)
    check "after the power cut: recording goes on" wait_for 120 more_segments_than "$n"
    systemctl stop "$UNIT"
    kept=$(segments)
    echo "boot-test: segments on disk: $kept"

    apt-get remove -y -qq dashcam-agent > /dev/null 2>&1
    check "apt remove: the package is gone" bash -c "! dpkg -s dashcam-agent 2>/dev/null | grep -q '^Status: install ok installed'"
    check "apt remove: the recordings are kept ($(segments) of $kept)" test "$(segments)" = "$kept"
    apt-get install -y -qq /opt/boot-test/dashcam-agent.deb > /dev/null 2>&1
    check "reinstalled: the changed conffile is kept" grep -q "Changed by the boot test" /etc/dashcam-agent/agent.yaml
    check "reinstalled: the unit runs again" wait_for 180 active
    apt-get purge -y -qq dashcam-agent > /dev/null 2>&1
    check "apt purge: the recordings are removed" test ! -e /var/lib/dashcam-agent
    check "apt purge: the config is removed" test ! -e /etc/dashcam-agent/agent.yaml
    echo "boot-test: phase 2 done"
    systemctl poweroff
fi
