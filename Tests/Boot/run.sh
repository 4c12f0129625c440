#!/usr/bin/env bash
# Boots the release .deb the way a board does: a Debian root made here (debootstrap, cached in
# .build-boot/), the package installed into it with apt (Debian resolves its dependencies), that
# root as an ext4 disk booted under QEMU (TCG) with Debian's kernel and systemd as PID 1, vivid,
# snd-aloop and gpio-sim loaded at boot. In the VM, checks.sh asserts what a user would see with
# systemctl, journalctl and the files, and prints "boot-test: ok|FAIL ..." lines on the console.
# Run on the host, as root:
#
#     bash Tests/Boot/run.sh PATH/TO/dashcam-agent_*.deb
#     bash Tests/Boot/run.sh --base          only make (or check) the cached base root
#
# Environment: BOOT_RELEASE (bookworm), BOOT_MIRROR (deb.debian.org), BOOT_TIMEOUT (s, per boot).
set -euo pipefail
BOOT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$BOOT_DIR/../.." && pwd)"
RELEASE="${BOOT_RELEASE:-bookworm}"
MIRROR="${BOOT_MIRROR:-http://deb.debian.org/debian}"
TIMEOUT="${BOOT_TIMEOUT:-900}"
DIR="$REPO/.build-boot/$RELEASE"
BASE="$DIR/base"

say() { printf 'boot: %s\n' "$*" >&2; }
die() { printf 'boot: error: %s\n' "$*" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, chroot and the image need it)"
[ $# -eq 1 ] && { [ -f "$1" ] || [ "$1" = --base ]; } || die "usage: $0 PATH/TO/dashcam-agent_*.deb | --base"
DEB=$(readlink -f -- "$1")

# --base needs only debootstrap: the test command makes the bases while it compiles.
HOST_PACKAGES="debootstrap qemu-system-x86 e2fsprogs linux-image-amd64 kmod"
[ "$1" != --base ] || HOST_PACKAGES=debootstrap
for p in $HOST_PACKAGES; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || {
        say "installing $p"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >&2; }
done

# chroot_in ROOT CMD...: CMD in ROOT with /proc, /sys, /dev and the apt cache mounted, in a mount
# namespace of its own; nothing it starts outlives it.
chroot_in() {
    local root=$1; shift
    mkdir -p "$DIR/apt-archives/partial"
    unshare --mount --pid --fork --propagation private -- bash -c '
        set -e
        root=$1 cache=$2; shift 2
        mount -t proc proc "$root/proc"
        mount --rbind /sys "$root/sys"
        mount --rbind /dev "$root/dev"
        mount --bind "$cache" "$root/var/cache/apt/archives"
        cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
        exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
    ' chroot_in "$root" "$DIR/apt-archives" "$@"
}

# ------------------------------------------------------------------ the base root (cached)
# What any Debian board has (systemd, udev, apt), and the tools the checks use.
BASE_PACKAGES=systemd,systemd-sysv,udev,kmod,dbus,apt,ca-certificates,procps,iproute2,v4l-utils,alsa-utils,gpiod,python3,e2fsprogs
stamp=$(printf '%s %s' "$RELEASE" "$BASE_PACKAGES" | sha256sum | cut -c1-16)
if [ ! -x "$BASE/usr/bin/apt-get" ] || [ -d "$BASE/debootstrap" ] || [ "$(cat "$DIR/base.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$BASE"
    mkdir -p "$DIR"
    say "debootstrap $RELEASE (minbase + systemd) into $BASE"
    start=$SECONDS
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$RELEASE" "$BASE" "$MIRROR" >&2 \
        || die "debootstrap failed (see $BASE/debootstrap/debootstrap.log)"
    echo "$stamp" > "$DIR/base.stamp"
    say "base root made in $((SECONDS - start)) s"
fi

[ "$1" != --base ] || exit 0

# The newest Debian kernel here, its initramfs (virtio disk and ext4 are in it) and gpio-sim
# built for it (Tests/HIL/build-gpio-sim.sh: Debian's kernel leaves it out).
KVER=$(for v in /boot/vmlinuz-*-amd64; do echo "${v#/boot/vmlinuz-}"; done | sort -rV | head -1)
[ -f "/boot/initrd.img-$KVER" ] && [ -d "/lib/modules/$KVER/kernel" ] || die "no kernel with initramfs and modules in /boot"
mkdir -p "$DIR/modules"
bash "$REPO/Tests/HIL/build-gpio-sim.sh" "$KVER" "$DIR/modules" >&2

# ------------------------------------------------------------------ this run's root and disk
RUN="$DIR/run"
rm -rf "$RUN"
mkdir -p "$RUN"
ROOT="$RUN/root"
say "copying the base root"
cp -a "$BASE" "$ROOT"

# The package, the way a user installs a downloaded .deb: apt fetches what it depends on.
cp "$DEB" "$ROOT/root/"
say "apt install ./$(basename "$DEB")"
chroot_in "$ROOT" apt-get update -qq >&2
chroot_in "$ROOT" apt-get install -y -qq --no-install-recommends "/root/$(basename "$DEB")" >&2

# The kernel's modules the board needs at boot: the simulated camera, sound card and GPIO chip,
# with everything they depend on, and gpio-sim built here.
for m in vivid snd-aloop configfs; do
    modprobe -S "$KVER" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
done | sort -u | while read -r ko; do
    install -D -m 0644 "$ko" "$ROOT$ko"
done
install -D -m 0644 "$DIR/modules/gpio-sim-hil.ko" "$ROOT/lib/modules/$KVER/extra/gpio-sim-hil.ko"
cp /lib/modules/"$KVER"/modules.{order,builtin,builtin.modinfo} "$ROOT/lib/modules/$KVER/" 2>/dev/null || true
depmod -b "$ROOT" "$KVER"

# The board: a console, a root disk, the devices loaded at boot, the agent's config, the checks.
echo boot-test > "$ROOT/etc/hostname"
echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" > "$ROOT/etc/fstab"
printf 'vivid\nsnd-aloop\n' > "$ROOT/etc/modules-load.d/boot-test.conf"
echo "options vivid n_devs=1 node_types=0x1 num_inputs=1 input_types=0x0" > "$ROOT/etc/modprobe.d/boot-test.conf"
install -D -m 0644 "$REPO/Tests/HIL/lib.sh" "$ROOT/opt/boot-test/lib.sh"
install -D -m 0755 "$BOOT_DIR/checks.sh" "$ROOT/opt/boot-test/checks.sh"
install -D -m 0644 "$BOOT_DIR/boot-test-gpio-sim.service" "$ROOT/etc/systemd/system/boot-test-gpio-sim.service"
install -D -m 0644 "$BOOT_DIR/boot-test-checks.service" "$ROOT/etc/systemd/system/boot-test-checks.service"
ln -sf /etc/systemd/system/boot-test-gpio-sim.service "$ROOT/etc/systemd/system/multi-user.target.wants/"
ln -sf /etc/systemd/system/boot-test-checks.service "$ROOT/etc/systemd/system/multi-user.target.wants/"
cp "$DEB" "$ROOT/opt/boot-test/dashcam-agent.deb"
# The conffile as a user edits it: the simulated devices, small and slow for TCG.
cat > "$ROOT/etc/dashcam-agent/agent.yaml" <<EOF
# Changed by the boot test (a changed conffile must survive a reinstall).
camera:
  source: v4l2
  device: /dev/dashcam-camera
  width: 320
  height: 180
  fps: 5
  buffers: 16
encoder:
  preference: [libx265]
  segmentSeconds: 5
recording:
  dir: /var/lib/dashcam-agent/recordings
device:
  locale: en-US
speech:
  sink: alsa
  device: hw:Loopback,0,0
haptics:
  chip: gpio-sim.0-node0
  line: haptic
EOF

IMAGE="$RUN/disk.ext4"
size_mb=$(( $(du -sm "$ROOT" | cut -f1) + 1024 ))
say "disk: ${size_mb} MB ext4 from the root"
mkfs.ext4 -q -F -L boot-test -d "$ROOT" "$IMAGE" "${size_mb}M"

# boot N [MARKER]: boots the disk; the console goes to console-N.log. Returns when the VM powers
# off, or kills it (-9: the power cut) once MARKER appears on the console.
boot() {
    local log="$RUN/console-$1.log" start=$SECONDS
    say "boot $1 (kernel $KVER, TCG)"
    : > "$log"
    timeout -k 10 "$TIMEOUT" qemu-system-x86_64 -machine q35 -m 2048 -smp 2 -nographic -no-reboot \
        -kernel "/boot/vmlinuz-$KVER" -initrd "/boot/initrd.img-$KVER" \
        -append "root=/dev/vda rw console=ttyS0 panic=-1 boot-test.phase=$1" \
        -drive "file=$IMAGE,if=virtio,format=raw" -nic none \
        -serial "file:$log" -monitor none -display none &
    local vm=$!
    if [ -n "${2:-}" ]; then
        while kill -0 "$vm" 2>/dev/null && ! grep -aq "$2" "$log"; do sleep 1; done
        if kill -0 "$vm" 2>/dev/null; then
            pkill -9 -P "$vm" qemu-system-x86 2>/dev/null || true
            say "power cut: the VM killed with -9 after $((SECONDS - start)) s"
        fi
    fi
    wait "$vm" || true
    grep -a "boot-test:" "$log" | sed 's/^/  /' >&2
    say "boot $1 ended after $((SECONDS - start)) s"
}

# phase_done N: the checks of boot N ran to their end.
phase_done() { grep -aq "boot-test: phase $1 done" "$RUN/console-$1.log"; }

boot 1 "ready for the power cut"
phase_done 1 || say "phase 1 did not finish (see $RUN/console-1.log)"

# What the power cut left on the disk: every segment file whole (ffprobe reads it), only hidden
# temporary files may be cut short (the next boot removes them).
rm -rf "$RUN/recordings"
# debugfs reads the disk as it lies, without replaying ext4's journal: a folder whose inode was
# still only in the journal at the cut reads as a bad inode. Then the journal is replayed on a copy
# (e2fsck, as the kernel does at the next mount) and read from there; boot 2 mounts the original.
debugfs -R "rdump /var/lib/dashcam-agent/recordings $RUN" "$IMAGE" 2>/dev/null || true
if [ ! -d "$RUN/recordings" ]; then
    cp --sparse=always "$IMAGE" "$RUN/replayed.ext4"
    e2fsck -fy "$RUN/replayed.ext4" > "$RUN/e2fsck.log" 2>&1 || true
    debugfs -R "rdump /var/lib/dashcam-agent/recordings $RUN" "$RUN/replayed.ext4" 2>/dev/null || true
    rm -f "$RUN/replayed.ext4"
    say "read the recordings after replaying the journal on a copy (e2fsck: $(tail -1 "$RUN/e2fsck.log"))"
fi
whole=0 broken=0
while IFS= read -r -d '' f; do
    if ffprobe -v error -select_streams v:0 -count_frames -show_entries stream=codec_name,nb_read_frames -of csv=p=0 "$f" | grep -q '^hevc,[1-9]'; then
        whole=$((whole + 1))
    else
        broken=$((broken + 1)); say "not whole: $f"
    fi
done < <(find "$RUN/recordings" -name '[0-9]*.mp4' -print0 2>/dev/null)
temp=$( { find "$RUN/recordings" -name '.*' ! -name .recording-order -type f 2>/dev/null || true; } | wc -l)
say "after the power cut: $whole whole segments, $broken broken, $temp temporary files"
power_cut_ok=$([ "$whole" -gt 0 ] && [ "$broken" -eq 0 ] && echo 1 || echo 0)

boot 2
phase_done 2 || say "phase 2 did not finish (see $RUN/console-2.log)"

failed=$(cat "$RUN"/console-*.log | grep -ac "boot-test: FAIL" || true)
phase_done 1 || failed=$((failed + 1))
phase_done 2 || failed=$((failed + 1))
[ "$power_cut_ok" = 1 ] || failed=$((failed + 1))
say "$(cat "$RUN"/console-*.log | grep -ac "boot-test: ok") checks passed, $failed failed, in $SECONDS s"
[ "$failed" -eq 0 ]
