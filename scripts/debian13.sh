#!/usr/bin/env bash
# Debian 13 (trixie): the agent built and tested against trixie's libraries (FFmpeg 7.1,
# libgpiod 2, libv4l 1.30, espeak-ng 1.52) in a Debian 13 root made here, with the Swift toolchain
# on PATH mounted into it (Debian 13's own Swift is older than the 6.2 our dependencies need).
# Needs root on a Debian or Ubuntu host (debootstrap, mount namespaces, chroot).
#
#     bash scripts/debian13.sh root         make the root, or bring a cached one up to date
#     bash scripts/debian13.sh run CMD...   run CMD in the root, in the repository's folder
#     bash scripts/debian13.sh test         the test command's steps for Debian 13 (below)
#     bash scripts/debian13.sh build|tests|release|release_build|boot|hil
#                                           one part of them (release_build: the .deb, unchecked)
#
# `test` runs, each against trixie's packages: the libgpiod shim's C checks (its libgpiod v2
# branch), the release .deb (the agent built in release, checked for deprecated calls) checked by
# trixie's lintian, the package booted with systemd on a trixie root of its own
# (Tests/Boot/run.sh), and the hardware-in-the-loop cases that touch what trixie changes, with the
# root as the VM's userspace; these two VMs side by side. The Swift build and tests in the root
# are `build` and `tests`; the test command runs them with DEBIAN13_TESTS=1, and always with
# PACKAGE=0 (then the VM suite runs the debug agent). PACKAGE=0, BOOT=0 and HIL=0 skip steps as
# in scripts/test.sh.
#
# Everything lives in .build-debian13/ (ignored): root/ (the Debian 13 root, reused while this
# script and scripts/install-deps.sh are unchanged), build/ (debug), release/, deb/.
# DEBIAN13_MIRROR picks the Debian mirror (default deb.debian.org).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${DEBIAN13_DIR:-$REPO/.build-debian13}"
ROOT="$DIR/root"
SUITE=trixie
MIRROR="${DEBIAN13_MIRROR:-http://deb.debian.org/debian}"

say() { printf 'debian13: %s\n' "$*" >&2; }
die() { printf 'debian13: error: %s\n' "$*" >&2; exit 2; }

# What the Swift toolchain needs to run and link in the root: its compiler and package manager
# load libstdc++, zlib, sqlite, ncurses, libcurl and libxml2 (Foundation's networking and XML);
# clang links against glibc's and GCC's start files and libraries and reads libstdc++'s headers.
TOOLCHAIN_PACKAGES=(
    ca-certificates git g++ binutils libc6-dev zlib1g-dev uuid-dev
    libcurl4t64 libxml2 libsqlite3-0 libncurses6 libedit2 tzdata
)
# What the hardware-in-the-loop cases run inside the VM (Tests/HIL/run.sh lists the host's).
HIL_PACKAGES=(
    kmod udev procps file iproute2 python3
    v4l-utils ffmpeg sox gpiod alsa-utils espeak-ng
)

[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, mounts and chroot need it)"

# The toolchain is the one on PATH, mounted read-only at the same path inside the root. It must
# live in a folder of its own (a swift.org tarball), not in the system's /usr.
toolchain_prefix() {
    local swiftc
    swiftc=$(command -v swiftc) || die "no swiftc on PATH (install a Swift 6.2 or later toolchain from swift.org)"
    local prefix
    prefix=$(dirname "$(dirname "$(dirname "$(readlink -f "$swiftc")")")")
    case "$prefix" in
        / | /usr | /usr/local) die "the Swift toolchain is installed in $prefix; the root needs one in a folder of its own (a swift.org tarball)" ;;
    esac
    echo "$prefix"
}
TOOLCHAIN=$(toolchain_prefix)

# run_in_root CMD...: CMD in the root, as root, in the repository's folder (mounted at the same
# path), with the toolchain first on PATH. Its own mount and PID namespaces: every mount and
# every process it leaves behind end with it.
run_in_root() {
    [ -x "$ROOT/usr/bin/apt-get" ] || die "no Debian 13 root at $ROOT (run: bash scripts/debian13.sh root)"
    unshare --mount --pid --fork --propagation private -- bash -c '
        set -e
        root=$1 repo=$2 toolchain=$3; shift 3
        # The root a mount point of its own: `ip netns` re-mounts "/" (mount --make-rslave).
        mount --bind "$root" "$root"
        mount --rbind /dev "$root/dev"
        mount -t proc proc "$root/proc"
        mount --rbind /sys "$root/sys"
        mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
        mount -t tmpfs -o mode=0755 tmpfs "$root/run"
        # Mount points made now: a repository or toolchain under /tmp lies under the new tmpfs.
        mkdir -p "$root$repo" "$root$toolchain"
        mount --bind "$repo" "$root$repo"
        mount --bind "$toolchain" "$root$toolchain"
        mount -o remount,bind,ro "$root$toolchain"
        cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
        exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
            PATH="$toolchain/usr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
            ${CI:+CI=$CI} DEBIAN_FRONTEND=noninteractive \
            bash -c "cd \"\$0\" && exec \"\$@\"" "$repo" "$@"
    ' run_in_root "$ROOT" "$REPO" "$TOOLCHAIN" "$@"
}

# The root is reused while the package lists are the same: a stamp holds their hash.
stamp_of() {
    { declare -p TOOLCHAIN_PACKAGES HIL_PACKAGES; cat "$REPO/scripts/install-deps.sh"; } | sha256sum | cut -d' ' -f1
}

make_root() {
    local want stamp="$DIR/root.stamp" start=$SECONDS
    want=$(stamp_of)
    if [ -x "$ROOT/usr/bin/apt-get" ] && [ ! -d "$ROOT/debootstrap" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        say "root: $ROOT (cached, Debian $(cat "$ROOT/etc/debian_version"))"
        return
    fi
    # debootstrap removes root/debootstrap/ when it succeeds: a root that still has it is half made.
    if [ ! -x "$ROOT/usr/bin/apt-get" ] || [ -d "$ROOT/debootstrap" ]; then
        command -v debootstrap >/dev/null || { say "installing debootstrap"; apt-get install -y -qq debootstrap >&2; }
        [ -e "/usr/share/debootstrap/scripts/$SUITE" ] || die "this debootstrap does not know $SUITE (install a newer debootstrap)"
        rm -rf "$ROOT"
        mkdir -p "$DIR"
        say "debootstrap $SUITE into $ROOT (from $MIRROR)"
        debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" >&2 || die "debootstrap failed (see $ROOT/debootstrap/debootstrap.log)"
        printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$MIRROR" "$SUITE" "$SUITE" "${MIRROR%/debian}/debian-security" "$SUITE" > "$ROOT/etc/apt/sources.list.d/debian.sources"
        rm -f "$ROOT/etc/apt/sources.list"
        # Services installed into the root (nginx, ...) must not start: the tests start their own.
        printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"
        chmod 0755 "$ROOT/usr/sbin/policy-rc.d"
    fi
    say "packages: the toolchain's, the agent's (scripts/install-deps.sh) and the VM cases'"
    run_in_root apt-get update -qq >&2
    run_in_root apt-get install -y -qq --no-install-recommends "${TOOLCHAIN_PACKAGES[@]}" "${HIL_PACKAGES[@]}" >&2
    run_in_root bash scripts/install-deps.sh >&2
    run_in_root apt-get clean
    echo "$want" > "$stamp"
    say "root: $ROOT ready in $((SECONDS - start)) s (Debian $(cat "$ROOT/etc/debian_version"))"
}

# Dependencies are resolved on the host (its git reaches the package sources), into the scratch
# folder the root's build then uses without fetching.
resolve() { (cd "$REPO" && swift package resolve "${RESOLVED_FLAGS[@]}" --scratch-path "$1" >&2); }

# shellcheck source=steps.sh
source "$REPO/scripts/steps.sh"

# No call of what Debian 13's libraries deprecate (FFmpeg 7.1's AVCodec.pix_fmts, ...) where a
# replacement exists: in a fresh build folder every file compiles, so every such warning is in
# the build's log (LOG).
no_deprecated_calls() {
    if grep -E "^$REPO/(Sources|Tests)/.*deprecated" "$1" | sort -u >&2; then
        die "the build above calls deprecated API (see the lines above)"
    fi
}

# The debug build and its tests' build, checked for deprecated calls.
build_tests() {
    run_in_root swift build --build-tests --scratch-path "$DIR/build" "${DEBUG_BUILD_FLAGS[@]}" 2>&1 | tee "$DIR/build.log"
    no_deprecated_calls "$DIR/build.log"
}

# The release .deb (its path in deb.path), its build checked for deprecated calls.
build_deb() {
    run_in_root env DEB_SCRATCH="$DIR/release" DEB_OUT="$DIR/deb" bash deploy/build-deb.sh 2>&1 > "$DIR/deb.path" | tee "$DIR/release.log" >&2
    no_deprecated_calls "$DIR/release.log"
}

# The parts, each a step or a few, in the root made (or checked) once before them; `test` runs
# them in a row.
root_step() { step "Debian 13: root (debootstrap, packages)" make_root; }
shim_part() { step "Debian 13: libgpiod shim checks (C)" run_in_root bash Tests/CGPIODShim/run.sh "$DIR/shim"; }
build_part() {
    step "Debian 13: resolve dependencies (host)" resolve "$DIR/build"
    step "Debian 13: swift build --build-tests" build_tests
}
tests_part() {
    for target in "${TEST_TARGETS[@]}"; do
        step "Debian 13: swift test $target" run_in_root swift test --skip-build --scratch-path "$DIR/build" --filter "^$target\."
    done
}
release_build_part() {
    step "Debian 13: resolve dependencies (release)" resolve "$DIR/release"
    step "Debian 13: release .deb" build_deb
}
# DEBIAN13_RELEASE_BUILT=1: the package in deb.path was built by `release_build` already (the test
# command builds it beside the Debian 12 VMs); only its check is left.
release_part() {
    if [ "${DEBIAN13_RELEASE_BUILT:-0}" = 1 ] && [ -s "$DIR/deb.path" ]; then
        say "release .deb: $(tail -1 "$DIR/deb.path") (built before this)"
    else
        release_build_part
    fi
    step "Debian 13: dpkg-deb, lintian" run_in_root bash deploy/check-deb.sh "$(tail -1 "$DIR/deb.path")"
}
# On the host: a trixie root of its own (debootstrap), the package installed with apt.
boot_vm() { env BOOT_RELEASE=trixie bash "$REPO/Tests/Boot/run.sh" "$(tail -1 "$DIR/deb.path")"; }
BOOT_STEP="Debian 13: the .deb booted with systemd (VM)"
boot_part() { step "$BOOT_STEP" boot_vm; }
# The agent the package ships (the debug one with PACKAGE=0), with this root as the VM's userspace.
# The cases that touch what Debian 13 changes: its libgpiod tools and snd-aloop (05), libgpiod 2
# under the shim (07), libv4l 1.30 and FFmpeg 7.1 recording vivid (10), OpenCV 4.10 and espeak-ng
# 1.52 heard back from the sound card (40), all of them with `doctor` (50), and libgpiod 2's input
# request for the ignition line (80, in its short form). The others exercise the agent's own code
# on the host's kernel, the same on both releases, and run on Debian 12 only: 20-vivid-unplug,
# 30-voice-touch (the server's loop; it needs Debian 13's debug build), 60-gsensor, 70-clock-step.
# HIL_CASES picks others. The VM sees this folder whole (the agent's builds are in it; the root
# itself is the VM's /).
HIL13_CASES="05-devices 07-gpio-shim 10-vivid-record 40-vivid-dark 50-doctor 80-parking"
hil_vm() {
    local agent="$DIR/build/debug/dashcam-agent"
    [ "${PACKAGE:-1}" = 0 ] || agent="$DIR/release/release/dashcam-agent"
    local server="$DIR/build/debug/guidance-server"
    [ -x "$server" ] || server=
    env HIL_ROOT="$ROOT" HIL_RODIRS="$TOOLCHAIN/usr/lib/swift/linux $DIR" \
        HIL_SHIM_CHECK="$DIR/shim/shim_check" AGENT_BIN="$agent" ${server:+SERVER_BIN="$server"} \
        HIL_PARKING_SHORT=1 HIL_CASES="${HIL_CASES:-$HIL13_CASES}" bash "$REPO/Tests/HIL/run.sh"
}
HIL_STEP="Debian 13: hardware-in-the-loop (VM)"
hil_part() { step "$HIL_STEP" hil_vm; }
# Beside the boot test, whose stop check has the unit's 10-s bound, the cases (whose pace has no
# bound) give way when both want the CPU.
hil_vm_beside() { renice -n 10 -p "$BASHPID" > /dev/null; hil_vm; }

test_all() {
    root_step
    shim_part
    if [ "${DEBIAN13_TESTS:-0}" != 0 ] || [ "${PACKAGE:-1}" = 0 ]; then
        build_part
        tests_part
    else
        say "the Swift build and tests in the root skipped (DEBIAN13_TESTS=1 runs them)"
    fi
    local boot=0 hil=0
    if [ "${PACKAGE:-1}" != 0 ]; then
        release_part
        if [ "${BOOT:-1}" != 0 ]; then boot=1; else say "BOOT=0: boot test skipped"; fi
    else
        say "PACKAGE=0: release package skipped"
    fi
    if [ "${HIL:-1}" != 0 ]; then hil=1; else say "HIL=0: hardware-in-the-loop suite skipped"; fi
    # The two VMs side by side: neither depends on the other, and each keeps about one of two
    # cores busy here (the boot's checks and the cases wait on systemd's, the camera's and the
    # speaker's pace), so together they take little longer than the longer one; one after the
    # other left a core idle for ten minutes. Each has a 2 GB guest.
    if [ "$boot" = 1 ] && [ "$hil" = 1 ]; then
        side_by_side "$DIR/vm-logs" "$BOOT_STEP" boot_vm "$HIL_STEP" hil_vm_beside
    else
        [ "$boot" = 0 ] || boot_part
        [ "$hil" = 0 ] || hil_part
    fi
    step_times "Debian 13 ($(cat "$ROOT/etc/debian_version")) passed; times:"
}

case "${1:-}" in
    root) make_root ;;
    run) shift; [ "$#" -gt 0 ] || die "run what?"; run_in_root "$@" ;;
    test) test_all ;;
    build | hil) root_step; shim_part; "${1}_part"; step_times "Debian 13 ($1) passed; times:" ;;
    tests | release | release_build | boot) root_step; "${1}_part"; step_times "Debian 13 ($1) passed; times:" ;;
    *) sed -n '2,/^set -euo/{/^set -euo/!p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 64 ;;
esac
