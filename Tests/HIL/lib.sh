# shellcheck shell=bash
# Shared helpers for the HIL suite. Sourced by in-vm.sh and by every case (inside the VM).
#
# Kernel pieces are loaded by `hil_load_<name>` functions; in-vm.sh calls one per name in
# HIL_MODULES (default "vivid gpio-sim snd-aloop lis3dh"), once per VM boot. To add a piece: write its
# `hil_load_<name>` here, add the name to HIL_MODULES in in-vm.sh, and (for out-of-tree modules)
# build them in run.sh's host stage into "$HIL_WORK/modules", which the VM sees.

HIL_DIR="${HIL_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"

# vivid as a plain webcam: one instance, only a video-capture node (/dev/video0), one input of
# type webcam (input_types: two bits per input, 0 = webcam).
HIL_VIVID_PARAMS=(n_devs=1 node_types=0x1 num_inputs=1 input_types=0x0)
HIL_VIDEO_DEV="${HIL_VIDEO_DEV:-/dev/video0}"
# Small and slow, for QEMU TCG.
HIL_WIDTH="${HIL_WIDTH:-320}"
HIL_HEIGHT="${HIL_HEIGHT:-180}"
HIL_FPS="${HIL_FPS:-5}"
HIL_SEGMENT_SECONDS="${HIL_SEGMENT_SECONDS:-5}"

hil_log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S.%3N)" "$*"; }

# Fail bookkeeping for cases: hil_check COND-CMD... "message"; hil_case_result exits.
HIL_FAILED=0
hil_ok() { hil_log "ok: $*"; }
hil_fail() { hil_log "FAIL: $*"; HIL_FAILED=$((HIL_FAILED + 1)); }
hil_case_result() {
    if [ "$HIL_FAILED" -eq 0 ]; then hil_log "case result: PASS"; exit 0; fi
    hil_log "case result: FAIL ($HIL_FAILED failed checks)"; exit 1
}

# Times are $EPOCHREALTIME values (seconds.micro). Polling must stay cheap: under TCG every
# process the harness spawns takes CPU from the agent (and shows up as dropped frames).
hil_now() { echo "$EPOCHREALTIME"; }
hil_us() { local t=${1:-$EPOCHREALTIME}; echo $(( 10#${t/./} )); }   # as integer microseconds
# Seconds from START to END (default now), 2 decimals.
hil_since() { hil_fmt_us $(( $(hil_us "${2:-$EPOCHREALTIME}") - $(hil_us "$1") )); }

hil_fmt_us() { printf '%d.%02d' $(($1 / 1000000)) $(($1 % 1000000 / 10000)); }

# hil_poll_since START TIMEOUT_S CMD...: runs CMD every 0.25 s until it succeeds or TIMEOUT_S
# have passed since START (an $EPOCHREALTIME). Sets HIL_ELAPSED_US / HIL_ELAPSED (s, 2 decimals)
# to the time from START to the success (or to the give-up). 0 on success, 1 on timeout.
# shellcheck disable=SC2034  # HIL_ELAPSED is for the callers
hil_poll_since() {
    local start_us deadline
    start_us=$(hil_us "$1"); deadline=$(( start_us + ${2%.*} * 1000000 )); shift 2
    while :; do
        if "$@" >/dev/null; then
            HIL_ELAPSED_US=$(( $(hil_us) - start_us )); HIL_ELAPSED=$(hil_fmt_us "$HIL_ELAPSED_US")
            return 0
        fi
        if [ "$(hil_us)" -ge "$deadline" ]; then
            HIL_ELAPSED_US=$(( $(hil_us) - start_us )); HIL_ELAPSED=$(hil_fmt_us "$HIL_ELAPSED_US")
            return 1
        fi
        sleep 0.25
    done
}

# hil_wait_for TIMEOUT_S CMD...: runs CMD every 0.25 s until it succeeds (0) or TIMEOUT_S (1).
hil_wait_for() {
    local deadline=$(( $(hil_us) + ${1%.*} * 1000000 )); shift
    while :; do
        "$@" && return 0
        [ "$(hil_us)" -ge "$deadline" ] && return 1
        sleep 0.25
    done
}

# ---------------------------------------------------------------- vivid (the camera)

hil_vivid_loaded() { [ -d /sys/module/vivid ]; }

hil_video_node_ready() {
    [ -c "$HIL_VIDEO_DEV" ] && v4l2-ctl -d "$HIL_VIDEO_DEV" --info 2>/dev/null | grep -q 'Driver name *: vivid'
}

# Loads vivid as a webcam and waits for its node. Called once per boot by in-vm.sh, and by
# cases that want a fresh device (hil_vivid_fresh).
hil_load_vivid() {
    if ! hil_vivid_loaded; then
        modprobe vivid "${HIL_VIVID_PARAMS[@]}" || { hil_log "modprobe vivid failed"; return 1; }
    fi
    udevadm settle -t 10 2>/dev/null || true
    if ! hil_wait_for 10 hil_video_node_ready; then
        hil_log "vivid loaded but $HIL_VIDEO_DEV is not a vivid capture node:"
        ls -l /dev/video* 2>&1
        return 1
    fi
}

hil_unload_vivid() {
    hil_vivid_loaded || return 0
    modprobe -r vivid
}

# Unloads (if loaded) and loads vivid again, so a case starts from a fresh camera.
hil_vivid_fresh() {
    hil_unload_vivid || { hil_log "modprobe -r vivid failed (something holds $HIL_VIDEO_DEV?)"; return 1; }
    hil_load_vivid
}

# The unplug. `modprobe -r vivid` is refused ("Module vivid is in use") while any process has a
# vivid node open, streaming or not: the open character device holds a reference on the module.
# Unbinding the platform device is what a real unplug does to the driver: the node is
# unregistered under the program, which gets ENODEV / POLLERR. The module stays loaded.
hil_unplug_vivid() {
    local d n=0
    for d in /sys/bus/platform/drivers/vivid/vivid.*; do
        [ -e "$d" ] || continue
        echo "${d##*/}" > /sys/bus/platform/drivers/vivid/unbind || return 1
        n=$((n + 1))
    done
    [ "$n" -gt 0 ] || { hil_log "no bound vivid device to unplug"; return 1; }
    hil_wait_for 5 test ! -e "$HIL_VIDEO_DEV"
}

# The return. If nothing holds the old device any more, the module is reloaded
# (`modprobe -r vivid; modprobe vivid`: a fresh device, as after a real replug); otherwise the
# device is bound again. Prints which path it took.
hil_replug_vivid() {
    if modprobe -r vivid 2>/dev/null; then
        echo "modprobe -r vivid + modprobe vivid"
        modprobe vivid "${HIL_VIVID_PARAMS[@]}" || return 1
    else
        echo "bind (modprobe -r vivid refused: the removed device is still held open)"
        local p
        for p in /sys/devices/platform/vivid.*; do
            [ -e "$p" ] || continue
            echo "${p##*/}" > /sys/bus/platform/drivers/vivid/bind || return 1
        done
    fi
    udevadm settle -t 10 2>/dev/null || true
    hil_wait_for 10 test -c "$HIL_VIDEO_DEV"
}

# Open fds of PID that point at a video node (e.g. "/dev/video0 (deleted)"), one a line.
hil_video_fds() { find /proc/"$1"/fd -maxdepth 1 -type l -lname '/dev/video*' -printf '%l\n' 2>/dev/null; }

# ---------------------------------------------------------------- gpio-sim (the haptic motor's GPIO)

# gpio-sim is not in Debian's kernel: run.sh builds it on the host (build-gpio-sim.sh) and copies
# it into $HIL_WORK/modules. One chip, one bank of 8 lines; line 5 is named "haptic".
HIL_GPIO_SIM_KO="${HIL_GPIO_SIM_KO:-${HIL_WORK:-}/modules/gpio-sim-hil.ko}"
HIL_GPIO_SIM_CFG=/sys/kernel/config/gpio-sim/dashcam      # the chip's configfs directory
HIL_GPIO_LINES=8
HIL_HAPTIC_LINE=5
HIL_HAPTIC_NAME=haptic
# The ignition sense (parking mode): an input the test pulls up (ignition on) or down (off).
HIL_IGNITION_LINE=2
HIL_IGNITION_NAME=ignition

# Sets (and exports) the live chip's names, read from configfs:
#   HIL_GPIO_CHIP     gpiochipN, for gpioset/gpioget/gpioinfo and the program under test
#   HIL_GPIO_DEV      /dev/gpiochipN
#   HIL_GPIO_SIM_DEV  its platform device (gpio-sim.N)
#   HIL_HAPTIC_VALUE  sysfs file: what a program drives on the haptic line (0/1)
# hil_load_gpio_sim calls it, and cases inherit the variables; 1 if there is no live chip.
hil_gpio_sim_vars() {
    local live=
    read -r live < "$HIL_GPIO_SIM_CFG/live" 2>/dev/null && [ "$live" = 1 ] || return 1
    read -r HIL_GPIO_CHIP < "$HIL_GPIO_SIM_CFG/gpio-bank0/chip_name" || return 1
    read -r HIL_GPIO_SIM_DEV < "$HIL_GPIO_SIM_CFG/dev_name" || return 1
    HIL_GPIO_DEV=/dev/$HIL_GPIO_CHIP
    HIL_HAPTIC_VALUE=$(hil_gpio_sim_value_path "$HIL_HAPTIC_LINE")
    export HIL_GPIO_CHIP HIL_GPIO_DEV HIL_GPIO_SIM_DEV HIL_HAPTIC_VALUE
}

# hil_gpio_sim_value_path N: the sysfs file with line N's value as the chip sees it.
hil_gpio_sim_value_path() { echo "/sys/devices/platform/$HIL_GPIO_SIM_DEV/$HIL_GPIO_CHIP/sim_gpio$1/value"; }
# hil_gpio_sim_pull N up|down: what the outside world does to input line N (an ignition on or off).
hil_gpio_sim_pull() { echo "pull-$2" > "/sys/devices/platform/$HIL_GPIO_SIM_DEV/$HIL_GPIO_CHIP/sim_gpio$1/pull"; }
# hil_gpio_sim_value N: prints line N's value (0/1). Builtins only: cheap enough to poll.
hil_gpio_sim_value() {
    local v
    read -r v < "/sys/devices/platform/$HIL_GPIO_SIM_DEV/$HIL_GPIO_CHIP/sim_gpio$1/value" || return 1
    echo "$v"
}
# hil_gpio_sim_value_is N V: line N reads V (for hil_wait_for / hil_poll_since).
hil_gpio_sim_value_is() {
    local v
    read -r v < "/sys/devices/platform/$HIL_GPIO_SIM_DEV/$HIL_GPIO_CHIP/sim_gpio$1/value" && [ "$v" = "$2" ]
}

# libgpiod's tools differ by release: Debian 12 ships v1 (gpiofind NAME, gpioinfo CHIP,
# gpioset --mode=signal), Debian 13 v2 (gpioinfo NAME, gpioinfo -c CHIP, gpioset -c CHIP). The
# cases call these, which speak both.
# (The first line of --version names the version; a later one says "LGPLv2.1".)
hil_gpiod_v2() { gpioinfo --version 2>/dev/null | awk 'NR == 1 && / v2\./ { v2 = 1 } END { exit !v2 }'; }
# hil_gpio_find NAME: prints "CHIP OFFSET" of the line called NAME.
hil_gpio_find() {
    if hil_gpiod_v2; then gpioinfo "$1" | awk '{ print $1, $2; exit }'
    else gpiofind "$1"; fi
}
# hil_gpio_chip_info CHIP: gpioinfo's listing of CHIP's lines.
hil_gpio_chip_info() {
    if hil_gpiod_v2; then gpioinfo -c "$1"; else gpioinfo "$1"; fi
}
# hil_gpio_line_info CHIP OFFSET: gpioinfo's line for one line of CHIP.
hil_gpio_line_info() { hil_gpio_chip_info "$1" | grep -E "line +$2:"; }
# hil_gpio_line_unused INFO: a line from hil_gpio_line_info says no program holds it (v1 says
# "unused"; v2 names a holder as consumer="...", and nothing when there is none).
hil_gpio_line_unused() {
    if hil_gpiod_v2; then [[ $1 != *consumer=* ]]; else [[ $1 == *unused* ]]; fi
}
# hil_gpio_hold CHIP OFFSET: drives the line to 1 until it is signalled (SIGTERM), then lets it
# go. No fixed period: on a busy VM a check may come late, and the line must still be held then.
# Run it in the background (&): it becomes gpioset, so $! is what to signal.
hil_gpio_hold() {
    if hil_gpiod_v2; then exec gpioset -c "$1" "$2=1"
    else exec gpioset --mode=signal "$1" "$2=1"; fi
}

# Loads gpio-sim and makes the chip live. Called once per boot by in-vm.sh.
hil_load_gpio_sim() {
    local cfg=$HIL_GPIO_SIM_CFG bank=$HIL_GPIO_SIM_CFG/gpio-bank0
    modprobe configfs || { hil_log "modprobe configfs failed"; return 1; }
    mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config || return 1
    if [ ! -d /sys/module/gpio_sim_hil ]; then
        [ -f "$HIL_GPIO_SIM_KO" ] || { hil_log "no $HIL_GPIO_SIM_KO (run.sh builds it)"; return 1; }
        insmod "$HIL_GPIO_SIM_KO" || { hil_log "insmod $HIL_GPIO_SIM_KO failed"; return 1; }
    fi
    hil_wait_for 5 test -d /sys/kernel/config/gpio-sim || { hil_log "no configfs gpio-sim directory"; return 1; }
    if [ ! -d "$cfg" ] && ! {
        mkdir "$cfg" "$bank" &&
            echo "$HIL_GPIO_LINES" > "$bank/num_lines" &&
            mkdir "$bank/line$HIL_HAPTIC_LINE" &&
            echo "$HIL_HAPTIC_NAME" > "$bank/line$HIL_HAPTIC_LINE/name" &&
            mkdir "$bank/line$HIL_IGNITION_LINE" &&
            echo "$HIL_IGNITION_NAME" > "$bank/line$HIL_IGNITION_LINE/name" &&
            echo 1 > "$cfg/live"
    }; then
        hil_log "creating the chip in $cfg failed"; return 1
    fi
    hil_gpio_sim_vars || { hil_log "chip $cfg is not live"; return 1; }
    udevadm settle -t 10 2>/dev/null || true
    hil_wait_for 10 test -c "$HIL_GPIO_DEV" || { hil_log "no $HIL_GPIO_DEV"; return 1; }
    [ -f "$HIL_HAPTIC_VALUE" ] || { hil_log "no $HIL_HAPTIC_VALUE"; return 1; }
    hil_log "gpio-sim: $HIL_GPIO_CHIP ($HIL_GPIO_DEV, $HIL_GPIO_SIM_DEV), line $HIL_HAPTIC_LINE" \
        "'$HIL_HAPTIC_NAME' value at $HIL_HAPTIC_VALUE"
    hil_gpio_chip_info "$HIL_GPIO_CHIP"
}

# Cases started by in-vm.sh inherit the variables; anything else gets them here.
[ -n "${HIL_GPIO_CHIP:-}" ] || hil_gpio_sim_vars 2>/dev/null || true

# ---------------------------------------------------------------- snd-aloop (the speaker)

# snd-aloop's card "Loopback": what a program plays to device 0 is recorded from device 1.
HIL_AUDIO_CARD=Loopback
HIL_AUDIO_PLAYBACK="hw:$HIL_AUDIO_CARD,0,0"
HIL_AUDIO_CAPTURE="hw:$HIL_AUDIO_CARD,1,0"

# The card's PCM nodes exist (/proc/asound/Loopback links to its cardN directory).
hil_audio_ready() {
    local card
    card=$(readlink "/proc/asound/$HIL_AUDIO_CARD" 2>/dev/null) || return 1
    [ -c "/dev/snd/pcmC${card#card}D0p" ] && [ -c "/dev/snd/pcmC${card#card}D1c" ]
}

# hil_audio_running pcm0p|pcm1c: that end of the loop is streaming (pcm0p: something plays to
# HIL_AUDIO_PLAYBACK; pcm1c: something records from HIL_AUDIO_CAPTURE). Builtins only.
hil_audio_running() {
    local l
    while read -r l; do
        [ "$l" = "state: RUNNING" ] && return 0
    done < "/proc/asound/$HIL_AUDIO_CARD/$1/sub0/status"
    return 1
}
hil_audio_playback_running() { hil_audio_running pcm0p; }
hil_audio_capture_running() { hil_audio_running pcm1c; }

# sox_stat WAV > FILE, then stat_figure FILE NAME: NAME's number (e.g. "RMS amplitude").
sox_stat() { sox "$1" -n stat 2>&1; }
stat_figure() { awk -F: -v n="$2" '{ gsub(/ +/, " ", $1) } $1 == n { gsub(/ /, "", $2); print $2 }' "$1"; }
# at_least A B: the number A >= B.
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 >= b + 0) }'; }

# hil_watch_haptic_line STOPFILE: prints every change of the haptic line as "TIME VALUE" until
# STOPFILE exists. Builtins only, so it keeps up with 80 ms pulses; run it in the background.
hil_watch_haptic_line() {
    local v last=x
    while [ ! -e "$1" ]; do
        read -r v < "$HIL_HAPTIC_VALUE" || continue
        if [ "$v" != "$last" ]; then printf '%s %s\n' "$EPOCHREALTIME" "$v"; last=$v; fi
    done
}

# Loads snd-aloop and waits for its card. Called once per boot by in-vm.sh.
hil_load_snd_aloop() {
    if [ ! -d /sys/module/snd_aloop ]; then
        modprobe snd-aloop || { hil_log "modprobe snd-aloop failed"; return 1; }
    fi
    udevadm settle -t 10 2>/dev/null || true
    if ! hil_wait_for 10 hil_audio_ready; then
        hil_log "snd-aloop loaded but no $HIL_AUDIO_CARD card with PCM nodes:"
        cat /proc/asound/cards; ls -l /dev/snd
        return 1
    fi
    hil_log "snd-aloop: play to $HIL_AUDIO_PLAYBACK, record from $HIL_AUDIO_CAPTURE"
    cat /proc/asound/cards
}

# ---------------------------------------------------------------- the agent

# hil_write_config FILE OUTDIR: the agent's YAML config for the vivid camera.
# ------------------------------------------------------------------ G-sensor (i2c-stub + st_accel)
# A LIS3DH at 0x18 on i2c-stub, bound to Debian's st_accel_i2c driver: a real IIO accelerometer
# (/sys/bus/iio/devices/iio:deviceN, name "lis3dh"). Polling only: the stub has no interrupt line.
HIL_ACCEL_ADDR=0x18
hil_accel_bus() {
    local adapter
    for adapter in /sys/bus/i2c/devices/i2c-*; do
        [ "$(cat "$adapter/name" 2>/dev/null)" = "SMBus stub driver" ] && { echo "${adapter##*-}"; return 0; }
    done
    return 1
}
hil_accel_iio() {
    local dev
    for dev in /sys/bus/iio/devices/iio:device*; do
        [ "$(cat "$dev/name" 2>/dev/null)" = lis3dh ] && { echo "$dev"; return 0; }
    done
    return 1
}
# The chip's axes in counts of 1 mg: hil_accel_set X Y Z (1000 = 1 g).
hil_accel_set() { python3 "$HIL_DIR/i2c_stub.py" "$(hil_accel_bus)" "$HIL_ACCEL_ADDR" lis3dh "$@"; }
hil_load_lis3dh() {
    modprobe i2c-stub chip_addr=$HIL_ACCEL_ADDR || return 1
    modprobe i2c-dev || return 1
    modprobe st_accel_i2c || return 1
    local bus
    bus=$(hil_accel_bus) || { echo "no i2c-stub adapter"; return 1; }
    # WHO_AM_I (0x0f, read as 0x8f) answers 0x33, a LIS3DH; the car at rest reads 1 g up.
    python3 "$HIL_DIR/i2c_stub.py" "$bus" "$HIL_ACCEL_ADDR" set 0x8f 0x33 || return 1
    hil_accel_set 0 0 1000 || return 1
    echo lis3dh "$HIL_ACCEL_ADDR" > "/sys/bus/i2c/devices/i2c-$bus/new_device" || return 1
    hil_wait_for 10 hil_accel_iio || { echo "no IIO device named lis3dh"; return 1; }
    echo "lis3dh on i2c-$bus at $HIL_ACCEL_ADDR: $(hil_accel_iio)"
}

hil_write_config() {
    cat > "$1" <<EOF
camera:
  source: v4l2
  device: $HIL_VIDEO_DEV
  width: $HIL_WIDTH
  height: $HIL_HEIGHT
  fps: $HIL_FPS
  # Under TCG the encoder's first frames take seconds; 16 buffers (3 s at 5 fps) let the camera
  # keep every frame meanwhile instead of overrunning.
  buffers: 16
encoder:
  preference: [libx265]
  segmentSeconds: $HIL_SEGMENT_SECONDS
recording:
  dir: $2
EOF
}

# Completed segments in the recording folder DIR, sorted: <utc day>/<seq>-<utc time>.mp4 (the
# agent writes a temp name, then renames, so only these are complete). Bash globbing only: cheap
# enough to poll.
hil_segments() {
    local f
    shopt -s nullglob
    for f in "$1"/[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]/[0-9]*-*.mp4; do
        f=${f#"$1"/}
        [[ $f =~ ^[0-9-]{10}/[0-9]+-[^/]*\.mp4$ ]] && printf '%s\n' "$f"
    done
    shopt -u nullglob
}
hil_segment_count() { local a; mapfile -t a < <(hil_segments "$1"); echo "${#a[@]}"; }
hil_has_segments() { [ "$(hil_segment_count "$1")" -ge "$2" ]; }
# Any other file left in DIR (temp files) - after a clean exit there should be none.
hil_leftovers() {
    # (.recording-order: the agent's log of the order segments were recorded in, kept on purpose)
    find "$1" -mindepth 1 -type f -printf '%P\n' 2>/dev/null | grep -vE '^[0-9-]{10}/[0-9]+-[^/]*\.mp4$|^\.recording-order$' | sort
}

# The sequence number in a segment's name (<seq>-<utc time>.mp4), without leading zeros.
hil_segment_seq() { local s=${1##*/}; s=${s%%-*}; echo $((10#$s)); }

# The agent's JSON line (from JSONL file) whose seq is SEQ; empty if none.
hil_record_for_seq() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
for line in open(sys.argv[1], errors="replace"):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    # With two streams a seq has two lines: the file's is the evidence's (the copy has none).
    if isinstance(r, dict) and str(r.get("seq")) == sys.argv[2] and r.get("stream") != "guidance":
        print(json.dumps(r)); break
EOF
}

# hil_check_segment FILE [check_segment.py options...]: the one segment check (see check_segment.py).
hil_check_segment() {
    local f=$1; shift
    python3 "$HIL_DIR/check_segment.py" "$f" --fps "$HIL_FPS" --seconds "$HIL_SEGMENT_SECONDS" \
        --width "$HIL_WIDTH" --height "$HIL_HEIGHT" "$@"
}

# hil_check_segment_with_record DIR NAME JSONL [--exact]: checks DIR/NAME against its JSON line.
# The record's `complete` decides exact vs partial checks (--exact: always exact).
hil_check_segment_with_record() {
    local dir=$1 name=$2 jsonl=$3; shift 3
    local seq rec
    seq=$(hil_segment_seq "$name")
    rec=$(hil_record_for_seq "$jsonl" "$seq")
    if [ -z "$rec" ]; then
        hil_log "no JSON line on stdout for seq $seq ($name)"
        hil_check_segment "$dir/$name" "$@"
        return 1
    fi
    hil_check_segment "$dir/$name" --record "$rec" "$@"
}
