#!/usr/bin/env bash
# Builds gpio-sim (a simulated GPIO chip, drivers/gpio/gpio-sim.c) out of tree for a Debian kernel,
# whose config leaves it out (CONFIG_GPIO_SIM and CONFIG_IRQ_SIM are not set). Run as root:
#
#     bash Tests/HIL/build-gpio-sim.sh KVER DEST_DIR
#
# Installs linux-headers-KVER and linux-source-X.Y if missing (apt-get), takes only gpio-sim.c,
# gpiolib.h and kernel/irq/irq_sim.c out of the source tarball, patches irq_sim.c (Debian's kernel
# does not export irq_to_desc) and builds both into one module, gpio-sim-hil.ko, with Kbuild.
# The module is cached in <repo>/.build-hil/gpio-sim/KVER/ (delete that directory to rebuild) and
# copied into DEST_DIR. HIL_SKIP_INSTALL=1: don't apt-get.
set -euo pipefail

HIL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HIL_DIR/../.." && pwd)"
MODULE=gpio-sim-hil.ko

say() { printf 'hil: gpio-sim: %s\n' "$*"; }
die() { printf 'hil: gpio-sim: error: %s\n' "$*" >&2; exit 2; }

[ $# -eq 2 ] || die "usage: $0 KVER DEST_DIR"
KVER=$1
DEST=$2
CACHE="$REPO_ROOT/.build-hil/gpio-sim/$KVER"
SERIES=$(printf '%s' "$KVER" | cut -d. -f1,2)          # 6.1.0-56-amd64 -> 6.1
SOURCE_PKG="linux-source-$SERIES"
TARBALL="/usr/src/$SOURCE_PKG.tar.xz"
KBUILD="/lib/modules/$KVER/build"

# A module is usable only if it was built for exactly this kernel.
built_for_kver() {
    [ -f "$1" ] && [ "$(modinfo -F vermagic "$1" 2>/dev/null | cut -d' ' -f1)" = "$KVER" ]
}

pkg_installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

install_build_packages() {
    local missing=() p
    for p in "linux-headers-$KVER" "$SOURCE_PKG" make; do pkg_installed "$p" || missing+=("$p"); done
    [ "${#missing[@]}" -gt 0 ] || return 0
    [ "${HIL_SKIP_INSTALL:-0}" != 1 ] || die "missing ${missing[*]} (and HIL_SKIP_INSTALL=1)"
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
}

build() {
    install_build_packages
    [ -f "$KBUILD/Makefile" ] || die "no kernel build tree at $KBUILD (linux-headers-$KVER)"
    [ -f "$TARBALL" ] || die "no kernel source tarball at $TARBALL ($SOURCE_PKG)"
    say "source: $SOURCE_PKG $(dpkg-query -W -f='${Version}' "$SOURCE_PKG"), kernel image $(dpkg-query -W -f='${Version}' "linux-image-$KVER" 2>/dev/null || echo '?')"

    # Kbuild does not cope with spaces in M=, so build in a fresh temporary directory.
    local tmp f top=$SOURCE_PKG                          # the tarball's top directory
    tmp=$(mktemp -d -t gpio-sim-hil.XXXXXX)
    # shellcheck disable=SC2064  # expand $tmp now
    trap "rm -rf '$tmp'" EXIT
    say "extracting gpio-sim.c, gpiolib.h, irq_sim.c from $TARBALL"
    tar -xJf "$TARBALL" -C "$tmp" \
        "$top/drivers/gpio/gpio-sim.c" "$top/drivers/gpio/gpiolib.h" "$top/kernel/irq/irq_sim.c"
    mkdir "$tmp/build"
    for f in drivers/gpio/gpio-sim.c drivers/gpio/gpiolib.h kernel/irq/irq_sim.c; do
        cp "$tmp/$top/$f" "$tmp/build/"
    done

    # irq_to_desc is not exported by Debian's kernel; generic_handle_irq does the same lookup
    # and calls the handler (handle_simple_irq, set by irq_sim's domain map).
    local from='handle_simple_irq(irq_to_desc(irqnum));' to='generic_handle_irq(irqnum);'
    grep -qF "$from" "$tmp/build/irq_sim.c" || die "irq_sim.c: '$from' not found; the patch needs updating"
    sed -i "s/handle_simple_irq(irq_to_desc(irqnum));/$to/" "$tmp/build/irq_sim.c"
    ! grep -q 'irq_to_desc' "$tmp/build/irq_sim.c" || die "irq_sim.c: irq_to_desc still used after the patch"

    printf '%s\n' 'obj-m := gpio-sim-hil.o' 'gpio-sim-hil-objs := gpio-sim.o irq_sim.o' > "$tmp/build/Kbuild"
    say "building $MODULE against $KBUILD"
    make -C "$KBUILD" M="$tmp/build" -j"$(nproc)" modules > "$tmp/build.log" 2>&1 \
        || { cat "$tmp/build.log" >&2; die "module build failed"; }
    built_for_kver "$tmp/build/$MODULE" || die "built $MODULE, but its vermagic is not $KVER"

    mkdir -p "$CACHE"
    cp "$tmp/build.log" "$tmp/build/irq_sim.c" "$tmp/build/Kbuild" "$CACHE/"
    cp "$tmp/build/$MODULE" "$CACHE/$MODULE.new"
    mv -f "$CACHE/$MODULE.new" "$CACHE/$MODULE"          # only a finished module counts as cached
}

if built_for_kver "$CACHE/$MODULE"; then
    say "cached: $CACHE/$MODULE"
else
    start=$(date +%s)
    build
    say "built $CACHE/$MODULE in $(( $(date +%s) - start ))s"
fi
mkdir -p "$DEST"
cp "$CACHE/$MODULE" "$DEST/"
say "$DEST/$MODULE ($(modinfo -F vermagic "$DEST/$MODULE"))"
