#!/usr/bin/env bash
# Hardware-in-the-loop suite: boots Debian's own kernel under QEMU (TCG) with virtme-ng, the
# host's filesystem as the guest's root, loads real drivers (vivid = a V4L2 webcam, gpio-sim =
# a GPIO chip, built here by build-gpio-sim.sh, snd-aloop = a loopback sound card) and runs the
# agent binary against them. Run on the host, as root:
#
#     bash Tests/HIL/run.sh
#     bash Tests/HIL/run.sh --prepare     only install and build what the host needs for it
#
# Environment:
#   AGENT_BIN         agent to test (default <repo>/.build/debug/dashcam-agent; the test command
#                     gives the release build the package ships)
#   SERVER_BIN        guidance-server for case 30 (default: the one beside AGENT_BIN)
#   HIL_CASES         only these cases (names or globs, e.g. "20-*"); default all cases/*.sh
#   HIL_KERNEL        a kernel version under /boot to use instead of the newest *-amd64
#   HIL_MODULES       kernel pieces to load in the VM (default "vivid gpio-sim snd-aloop lis3dh")
#   HIL_VM_MEMORY     guest memory (default 2G)
#   HIL_VM_TIMEOUT    seconds before the whole VM run is abandoned (default: 300 for the setup
#                     and each selected case's own bound)
#   HIL_SKIP_INSTALL  1 = don't check/install packages (build-gpio-sim.sh: no apt-get either)
#   HIL_ROOT          a Debian root folder to boot as the VM's userspace instead of the host's
#                     (scripts/debian13.sh passes its Debian 13 root): the cases then run that
#                     release's tools and libraries; the kernel and its modules stay the host's
#   HIL_RODIRS        with HIL_ROOT: more host folders the VM sees, read-only, at the same path
#                     (e.g. the Swift runtime a debug build's RUNPATH names)
#   HIL_SHIM_CHECK    the CGPIODShim check binary for case 07 (default: built here on the host)
#   HIL_TWO_STREAMS   case 10's streams, "EVIDENCE COPY" as WxH@FPS (default "640x360@10 320x180@5")
#
# Per-case logs and segment files: <repo>/.build-hil/run-<time>/ (also <repo>/.build-hil/latest).
# Ends with "N passed, N failed"; exits non-zero if any case failed or did not run.
set -euo pipefail

HIL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HIL_DIR/../.." && pwd)"
VIRTME_NG_VERSION="${VIRTME_NG_VERSION:-1.42}"   # the version seen working (README.md)

say() { printf 'hil: %s\n' "$*"; }
die() { printf 'hil: error: %s\n' "$*" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || die "run as root (the VM loads kernel modules; apt-get and /boot need root)"
[ "$(uname -m)" = x86_64 ] || die "x86_64 hosts only (uses qemu-system-x86 and Debian's amd64 kernel)"

# ------------------------------------------------------------------ packages (idempotent)
APT_PACKAGES=(
    qemu-system-x86 kmod linux-image-amd64          # the VM and its kernel
    busybox-static udev file iproute2               # what virtme-ng expects on the host
    python3 python3-venv                            # virtme-ng (pip) and check_segment.py
    v4l-utils ffmpeg                                 # camera + segment checks (ffprobe)
    sox gpiod alsa-utils espeak-ng                   # GPIO and audio cases
)   # build-gpio-sim.sh adds linux-headers-KVER, linux-source-X.Y and make for the kernel in use

pkg_installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

install_packages() {
    local missing=() p
    for p in "${APT_PACKAGES[@]}"; do pkg_installed "$p" || missing+=("$p"); done
    if [ "${#missing[@]}" -gt 0 ]; then
        say "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update
        apt-get install -y --no-install-recommends "${missing[@]}"
    else
        say "packages: all present"
    fi
}

# vng: on PATH already, or in a venv under .build-hil (Debian's python refuses system pip installs).
VNG=
find_vng() {
    local venv="$REPO_ROOT/.build-hil/venv"
    if command -v vng >/dev/null 2>&1 && vng --version >/dev/null 2>&1; then
        VNG=$(command -v vng)
    else
        if [ ! -x "$venv/bin/vng" ] && [ "${HIL_SKIP_INSTALL:-0}" != 1 ]; then
            say "installing virtme-ng $VIRTME_NG_VERSION into .build-hil/venv"
            python3 -m venv "$venv"
            "$venv/bin/pip" install --quiet "virtme-ng==$VIRTME_NG_VERSION"
        fi
        [ -x "$venv/bin/vng" ] || die "virtme-ng (vng) not found"
        VNG="$venv/bin/vng"
        export PATH="$venv/bin:$PATH"   # vng runs its helpers (virtme-run, ...) from PATH
    fi
    say "virtme-ng: $VNG ($("$VNG" --version 2>&1 | head -1))"
}

# ------------------------------------------------------------------ kernel
# Newest /boot/vmlinuz-*-amd64 whose modules are installed; depmod if its module index is missing.
KVER=
find_kernel() {
    local v cands=()
    if [ -n "${HIL_KERNEL:-}" ]; then
        cands=("$HIL_KERNEL")
    else
        for v in /boot/vmlinuz-*-amd64; do
            [ -e "$v" ] && cands+=("${v#/boot/vmlinuz-}")
        done
        mapfile -t cands < <(printf '%s\n' "${cands[@]}" | sort -rV)
    fi
    for v in "${cands[@]}"; do
        [ -n "$v" ] && [ -f "/boot/vmlinuz-$v" ] && [ -d "/lib/modules/$v/kernel" ] && { KVER=$v; break; }
    done
    [ -n "$KVER" ] || die "no /boot/vmlinuz-*-amd64 with /lib/modules/VER/kernel (install linux-image-amd64)"
    if [ ! -s "/lib/modules/$KVER/modules.dep" ] || [ ! -s "/lib/modules/$KVER/modules.dep.bin" ]; then
        say "depmod $KVER"
        depmod -a "$KVER"
    fi
    modinfo -k "$KVER" vivid >/dev/null 2>&1 || die "kernel $KVER has no vivid module"
    say "kernel: /boot/vmlinuz-$KVER"
}

# ------------------------------------------------------------------ agent
find_agent() {
    AGENT_BIN="${AGENT_BIN:-$REPO_ROOT/.build/debug/dashcam-agent}"
    case "$AGENT_BIN" in /*) ;; *) AGENT_BIN="$PWD/$AGENT_BIN" ;; esac
    # Its real path (a build's debug/ is a link): what the VM sees of another root is real folders.
    AGENT_BIN=$(readlink -f "$AGENT_BIN")
    if [ ! -x "$AGENT_BIN" ]; then
        die "agent binary not found or not executable: $AGENT_BIN
      build it:  (cd \"$REPO_ROOT\" && swift build --product dashcam-agent)   or set AGENT_BIN"
    fi
    say "agent: $AGENT_BIN"
    if [ -n "${SERVER_BIN:-}" ]; then
        SERVER_BIN=$(readlink -f "$SERVER_BIN")
        [ -x "$SERVER_BIN" ] || die "SERVER_BIN is not an executable: $SERVER_BIN"
        say "server (case 30): $SERVER_BIN"
    fi
}

# ------------------------------------------------------------------ main
[ "${HIL_SKIP_INSTALL:-0}" = 1 ] || install_packages
# --prepare: only the host's part (packages, virtme-ng, gpio-sim built into its cache), which the
# test command does while it compiles.
if [ "${1:-}" = --prepare ]; then
    find_vng
    find_kernel
    bash "$HIL_DIR/build-gpio-sim.sh" "$KVER" "$REPO_ROOT/.build-hil/prepared"
    exit 0
fi
find_agent
find_vng
find_kernel

mapfile -t CASES < <(
    for c in "$HIL_DIR"/cases/*.sh; do
        [ -e "$c" ] || continue
        n=$(basename "$c" .sh)
        if [ -n "${HIL_CASES:-}" ]; then
            keep=0
            for pat in $HIL_CASES; do
                # shellcheck disable=SC2053
                [[ $n == $pat || $n == $pat.sh ]] && keep=1
            done
            [ "$keep" = 1 ] || continue
        fi
        echo "$n"
    done)
[ "${#CASES[@]}" -gt 0 ] || die "no cases selected in $HIL_DIR/cases"

mkdir -p "$REPO_ROOT/.build-hil"
WORK="$REPO_ROOT/.build-hil/run-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$WORK/cases"
ln -sfn "$(basename "$WORK")" "$REPO_ROOT/.build-hil/latest"
say "work dir: $WORK"
say "cases: ${CASES[*]}"

# Host-side preparation: out-of-tree modules into "$WORK/modules", where lib.sh's loaders find them.
# gpio-sim is not in Debian's kernel; built once per kernel version (cached under .build-hil/gpio-sim).
case " ${HIL_MODULES:-gpio-sim} " in
    *" gpio-sim "* | *" gpio_sim "*) bash "$HIL_DIR/build-gpio-sim.sh" "$KVER" "$WORK/modules" ;;
esac

# The libgpiod shim's checks against gpio-sim (case 07), built for the release under test.
if [ -n "${HIL_SHIM_CHECK:-}" ]; then
    cp "$HIL_SHIM_CHECK" "$WORK/shim_check"
else
    bash "$REPO_ROOT/Tests/CGPIODShim/run.sh" "$WORK/shim" > "$WORK/shim-build.log" 2>&1 ||
        { cat "$WORK/shim-build.log"; die "building the shim check failed"; }
    cp "$WORK/shim/shim_check" "$WORK/shim_check"
fi

VNG_ARGS=(--run "/boot/vmlinuz-$KVER" --disable-kvm --memory "${HIL_VM_MEMORY:-2G}")
if [ -n "${HIL_ROOT:-}" ]; then
    # Another release's root: the VM sees the tests, the device configs, the agent's folder, the
    # run's folder and the kernel's modules at their host paths (mount points made in the root), and nothing else.
    [ -x "$HIL_ROOT/usr/bin/bash" ] || die "HIL_ROOT=$HIL_ROOT is not a root folder"
    say "userspace: $HIL_ROOT (Debian $(cat "$HIL_ROOT/etc/debian_version"))"
    VNG_ARGS+=(--root "$HIL_ROOT" --rwdir "$WORK=$WORK")
    # Each folder once, and none inside another already given: virtme-ng passes the mounts on the
    # kernel's command line, and past its 2 KB it starts another root through a script of its
    # own, which did not start here (a seventh folder, the server's, took it past).
    dirs=()
    # shellcheck disable=SC2086  # HIL_RODIRS is a list
    for d in ${HIL_RODIRS:-} "$REPO_ROOT/Tests" "$REPO_ROOT/device-config" "$(dirname "$AGENT_BIN")" ${SERVER_BIN:+"$(dirname "$SERVER_BIN")"} "/lib/modules/$KVER"; do
        d=$(readlink -f "$d")
        inside=0
        for e in "${dirs[@]}"; do [[ $d == "$e" || $d == "$e"/* ]] && inside=1; done
        [ "$inside" = 1 ] || dirs+=("$d")
    done
    for d in "${dirs[@]}"; do
        mkdir -p "$HIL_ROOT$d"
        VNG_ARGS+=(--rodir "$d=$d")
    done
    mkdir -p "$HIL_ROOT$WORK"
else
    VNG_ARGS+=(--rwdir "$WORK")
fi
"$VNG" --help 2>/dev/null | grep -q -- '--cpus' && VNG_ARGS+=(--cpus 2)
VM_ENV=("HIL_WORK=$WORK" "AGENT_BIN=$AGENT_BIN")
for v in SERVER_BIN HIL_CASES HIL_MODULES HIL_CASE_TIMEOUT HIL_HANG_SECONDS HIL_VOICE_TOUCH_ROUNDS HIL_SEGMENT_SECONDS HIL_PARKING_STILL_SECONDS HIL_PARKING_SHORT HIL_TWO_STREAMS; do
    [ -n "${!v:-}" ] && VM_ENV+=("$v=${!v}")
done
VM_CMD=$(printf '%q ' env "${VM_ENV[@]}" bash "$HIL_DIR/in-vm.sh")

# The whole VM's bound only catches a hang outside the cases (each case has its own): the setup's
# 300 s and every selected case's bound, however slowly a busy host runs them.
vm_timeout=300
for n in "${CASES[@]}"; do
    t=$(sed -n 's/^# hil-case-timeout: *\([0-9][0-9]*\)$/\1/p' "$HIL_DIR/cases/$n.sh" | head -1)
    vm_timeout=$((vm_timeout + ${t:-${HIL_CASE_TIMEOUT:-240}}))
done
vm_timeout=${HIL_VM_TIMEOUT:-$vm_timeout}
start=$(date +%s)
say "booting the VM (QEMU TCG; about 20 s before the first case; abandoned after $vm_timeout s)"
set +e
(cd "$WORK" && timeout -k 20 "$vm_timeout" "$VNG" "${VNG_ARGS[@]}" --exec "$VM_CMD" \
    < /dev/null 2>&1) | tee "$WORK/vm-console.log"
vm_rc=${PIPESTATUS[0]}
set -e
elapsed=$(( $(date +%s) - start ))
say "VM finished after ${elapsed}s (vng exit $vm_rc$([ "$vm_rc" -eq 124 ] && echo ', timed out'))"

passed=0 failed=0
echo
for n in "${CASES[@]}"; do
    line=$( { awk -F'\t' -v n="$n" '$1 == n' "$WORK/results.tsv" 2>/dev/null || true; } | tail -1)
    verdict=$(printf '%s' "$line" | cut -f2)
    secs=$(printf '%s' "$line" | cut -f3)
    if [ "$verdict" = PASS ]; then
        passed=$((passed + 1)); echo "PASS $n (${secs}s)"
    else
        failed=$((failed + 1))
        if [ -n "$verdict" ]; then
            echo "FAIL $n (${secs}s) - log: $WORK/cases/$n/case.log"
            # The log's end in the run's own output: a CI run keeps only what was printed.
            tail -n 40 "$WORK/cases/$n/case.log" 2>/dev/null | sed 's/^/    | /'
        else echo "FAIL $n (no result: the VM stopped before it finished) - see $WORK/vm-console.log"; fi
    fi
done
echo "logs: $WORK  (run took ${elapsed}s in the VM)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
