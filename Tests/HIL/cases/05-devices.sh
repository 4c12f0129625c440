#!/usr/bin/env bash
# Smoke test of the simulated haptics and voice hardware, driven only by stock tools:
#   * gpio-sim: libgpiod's tools (v1 on Debian 12, v2 on Debian 13) find line 5 of the sim chip by
#     its name "haptic"; while gpioset holds the line at 1 (until it is signalled) the sim reads 1, and 0
#     once it lets go
#   * snd-aloop: Korean speech from espeak-ng played to hw:Loopback,0,0 is recorded from
#     hw:Loopback,1,0 and is not silent (sox stat: maximum amplitude and RMS), while a recording
#     with nothing playing is silent (exactly 0)
set -uo pipefail
HIL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR/.. source=lib.sh
source "$HIL_DIR/lib.sh"
: "${CASE_DIR:?}"

PHRASE="전방에 차량이 있습니다. 속도를 줄이세요."   # "Vehicle ahead. Slow down."
RECORD_SECONDS=4
# Seen with this phrase: maximum amplitude 0.78, RMS 0.05 over 4 s. Silence is exactly 0.
MIN_MAX_AMPLITUDE=0.1
MIN_RMS=0.005


# ---------------------------------------------------------------- GPIO
if [ -z "${HIL_GPIO_CHIP:-}" ]; then
    hil_fail "gpio-sim chip is live (HIL_GPIO_CHIP unset; is gpio-sim in HIL_MODULES?)"
else
    hil_ok "gpio-sim chip $HIL_GPIO_CHIP ($HIL_GPIO_DEV), haptic value at $HIL_HAPTIC_VALUE"
    found=$(hil_gpio_find "$HIL_HAPTIC_NAME" 2>&1)
    tools=$(gpioinfo --version | head -1)
    if [ "$found" = "$HIL_GPIO_CHIP $HIL_HAPTIC_LINE" ]; then hil_ok "$tools finds $HIL_HAPTIC_NAME: $found"
    else hil_fail "$tools finds $HIL_HAPTIC_NAME at '$HIL_GPIO_CHIP $HIL_HAPTIC_LINE' (got '$found')"; fi

    v=$(hil_gpio_sim_value "$HIL_HAPTIC_LINE")
    if [ "$v" = 0 ]; then hil_ok "line $HIL_HAPTIC_LINE reads 0 before gpioset"
    else hil_fail "line $HIL_HAPTIC_LINE reads 0 before gpioset (got '$v')"; fi

    start=$(hil_now)
    hil_gpio_hold "$HIL_GPIO_CHIP" "$HIL_HAPTIC_LINE" &
    gpioset_pid=$!
    if hil_poll_since "$start" 5 hil_gpio_sim_value_is "$HIL_HAPTIC_LINE" 1; then
        hil_ok "line $HIL_HAPTIC_LINE reads 1 while gpioset holds it (${HIL_ELAPSED}s after start)"
    else
        hil_fail "line $HIL_HAPTIC_LINE reads 1 while gpioset holds it (still '$(hil_gpio_sim_value "$HIL_HAPTIC_LINE")' after ${HIL_ELAPSED}s)"
    fi
    kill -TERM "$gpioset_pid"
    wait "$gpioset_pid"
    rc=$?
    # libgpiod 1's gpioset catches the signal and exits 0; 2's ends on it (128 + 15).
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 143 ]; then hil_ok "gpioset ended on SIGTERM (exit $rc)"
    else hil_fail "gpioset ended on SIGTERM (got exit $rc)"; fi
    released=$(hil_now)
    if hil_poll_since "$released" 2 hil_gpio_sim_value_is "$HIL_HAPTIC_LINE" 0; then
        hil_ok "line $HIL_HAPTIC_LINE reads 0 after gpioset let go"
    else
        hil_fail "line $HIL_HAPTIC_LINE reads 0 after gpioset let go (got '$(hil_gpio_sim_value "$HIL_HAPTIC_LINE")')"
    fi
    hil_gpio_chip_info "$HIL_GPIO_CHIP" | sed 's/^/    /'
fi

# ---------------------------------------------------------------- audio
if ! hil_audio_ready; then
    hil_fail "snd-aloop card $HIL_AUDIO_CARD is there (is snd-aloop in HIL_MODULES?)"
    hil_case_result
fi
hil_ok "snd-aloop: playback $HIL_AUDIO_PLAYBACK, capture $HIL_AUDIO_CAPTURE"

# Nothing playing: the capture side records silence.
arecord -q -D "$HIL_AUDIO_CAPTURE" -f S16_LE -r 22050 -c 1 -d 1 "$CASE_DIR/silence.wav" 2> "$CASE_DIR/arecord-silence.log"
sox_stat "$CASE_DIR/silence.wav" > "$CASE_DIR/sox-stat-silence.txt"
max=$(stat_figure "$CASE_DIR/sox-stat-silence.txt" "Maximum amplitude")
if [ -n "$max" ] && ! at_least "$max" "$MIN_MAX_AMPLITUDE"; then hil_ok "silent with nothing playing (max amplitude $max)"
else hil_fail "silent with nothing playing (max amplitude '$max')"; cat "$CASE_DIR/arecord-silence.log"; fi

# Speech: under TCG espeak-ng takes 1.5 s or more (longer on a busy host) before it makes a sound,
# so play first and record RECORD_SECONDS from the moment the sound reaches the loop.
WAV="$CASE_DIR/cap.wav"
start=$(hil_now)
( espeak-ng -v ko "$PHRASE" --stdout 2> "$CASE_DIR/espeak.log" | aplay -D "$HIL_AUDIO_PLAYBACK" 2> "$CASE_DIR/aplay.log"
  echo "${PIPESTATUS[*]}" > "$CASE_DIR/play.rc" ) &
play_pid=$!
if hil_poll_since "$start" 20 hil_audio_playback_running; then
    hil_ok "espeak-ng | aplay -D $HIL_AUDIO_PLAYBACK: playing ${HIL_ELAPSED}s after start"
else
    hil_fail "espeak-ng | aplay -D $HIL_AUDIO_PLAYBACK: playing within 20 s"
fi
arecord -D "$HIL_AUDIO_CAPTURE" -f S16_LE -r 22050 -c 1 -d "$RECORD_SECONDS" "$WAV" 2> "$CASE_DIR/arecord.log"
rc=$?
if [ "$rc" -eq 0 ]; then hil_ok "arecord -D $HIL_AUDIO_CAPTURE exit 0"
else hil_fail "arecord -D $HIL_AUDIO_CAPTURE exit 0 (got $rc)"; cat "$CASE_DIR/arecord.log"; fi
wait "$play_pid"
rcs=$(cat "$CASE_DIR/play.rc" 2>/dev/null)
if [ "$rcs" = "0 0" ]; then hil_ok "espeak-ng | aplay: exit 0 after $(hil_since "$start")s"
else hil_fail "espeak-ng | aplay: exit 0 (got '$rcs')"; cat "$CASE_DIR/espeak.log" "$CASE_DIR/aplay.log"; fi

STAT="$CASE_DIR/sox-stat.txt"
sox_stat "$WAV" > "$STAT"
sed 's/^/    /' "$STAT"
len=$(stat_figure "$STAT" "Length (seconds)")
max=$(stat_figure "$STAT" "Maximum amplitude")
rms=$(stat_figure "$STAT" "RMS amplitude")
if at_least "$len" "$((RECORD_SECONDS - 1))"; then hil_ok "recorded ${len}s"; else hil_fail "recorded about ${RECORD_SECONDS}s (got '$len')"; fi
if at_least "$max" "$MIN_MAX_AMPLITUDE"; then hil_ok "speech recorded: max amplitude $max >= $MIN_MAX_AMPLITUDE"
else hil_fail "speech recorded: max amplitude >= $MIN_MAX_AMPLITUDE (got '$max')"; fi
if at_least "$rms" "$MIN_RMS"; then hil_ok "speech recorded: RMS $rms >= $MIN_RMS"
else hil_fail "speech recorded: RMS >= $MIN_RMS (got '$rms')"; fi

hil_case_result
