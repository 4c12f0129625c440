#!/usr/bin/env bash
# Builds dashcam-agent_VERSION_ARCH.deb into deploy/out/: the agent built with the static Swift
# standard library, the systemd unit, /etc/dashcam-agent/agent.yaml as a conffile, the board
# profiles, a udev rule (/dev/dashcam-camera, gpio group) and maintainer scripts that create the
# system user and an empty private token file. See deploy/README.md.
#
#     bash deploy/build-deb.sh                  # release build, static Swift stdlib, lld
#     AGENT_BIN=path bash deploy/build-deb.sh   # package a binary built elsewhere (the tests do)
#
# DEB_OUT (folder), DEB_COMPRESSION (xz, gzip, none), DEB_MAINTAINER ("Name <address>") and
# DEB_SCRATCH (the build folder) change the defaults. The binary is stripped in the package, not
# in place. The package's path is the only line printed on stdout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VERSION=$(sed -n 's/.*static let current = "\(.*\)".*/\1/p' Sources/GuidanceProtocol/ReleaseVersion.swift)
ARCH=$(dpkg --print-architecture)
if [ -z "${AGENT_BIN:-}" ]; then
    # No RUNPATH: every library the binary needs comes from the system's own folders. The build's
    # progress goes to stderr: stdout carries only the package's path.
    # Linked for a small resident size (see BENCHMARKS.md, "Recording"): no symbol table for the
    # dynamic linker (it kept every symbol alive and was read at each start), relative relocations
    # packed (DT_RELR, glibc 2.36), and the code a recording runs laid out together in the order
    # of deploy/dashcam-agent.order, so it occupies few pages (each function in a section of its own,
    # so the linker can place it: the code built here; the toolchain's own libraries come whole).
    ORDER="$PWD/deploy/dashcam-agent.order"
    LINK=(-Xswiftc -use-ld=lld -Xlinker --no-export-dynamic -Xlinker -z -Xlinker pack-relative-relocs
          -Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections)
    if [ -f "$ORDER" ]; then
        LINK+=(-Xlinker "--symbol-ordering-file=$ORDER" -Xlinker --no-warn-symbol-ordering)
    fi
    # The order file is not an input the build tracks: link again every time.
    rm -f "${DEB_SCRATCH:-.build}/release/dashcam-agent"
    # The versions in Package.resolved, as every build of the project.
    swift build -c release --force-resolved-versions --static-swift-stdlib --disable-local-rpath --product dashcam-agent "${LINK[@]}" ${DEB_SCRATCH:+--scratch-path "$DEB_SCRATCH"} >&2
    AGENT_BIN=${DEB_SCRATCH:-.build}/release/dashcam-agent
fi
OUT="${DEB_OUT:-deploy/out}"
ROOT=$(mktemp -d)
chmod 0755 "$ROOT"
trap 'rm -rf "$ROOT"' EXIT

MAINTAINER="${DEB_MAINTAINER:-dashcam-agent maintainers <maintainers@dashcam-agent.invalid>}"

install -D -m 0755 "$AGENT_BIN" "$ROOT/usr/bin/dashcam-agent"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$ROOT/usr/bin/dashcam-agent"
# OpenCV's people detector (Sources/CRoadVision), which the agent loads from here the first time
# its local guidance searches a picture for people: a plain C++ library, built as Debian builds
# one (hardened, no run path, only the libraries it calls), private to the package.
VISION=$ROOT/usr/lib/dashcam-agent/libRoadVision.so
mkdir -p "$(dirname "$VISION")"
c++ -std=c++17 -O2 -fPIC -shared -fstack-protector-strong -D_FORTIFY_SOURCE=2 -Wl,-z,relro -Wl,-z,now -Wl,--as-needed \
    -I/usr/include/opencv4 -ISources/CRoadVision/include Sources/CRoadVision/road_vision.cpp -o "$VISION" \
    -lopencv_objdetect -lopencv_imgproc -lopencv_core
chmod 0644 "$VISION"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$VISION"
# Where this release keeps units and udev rules, as systemd's and udev's pkg-config files say:
# /lib on Debian 12, /usr/lib on Debian 13 (whose lintian refuses /lib: it is an alias of /usr/lib).
UNIT_DIR=$(pkg-config --variable=systemdsystemunitdir systemd 2>/dev/null || echo /lib/systemd/system)
UDEV_DIR=$(pkg-config --variable=udevdir udev 2>/dev/null || echo /lib/udev)
install -D -m 0644 deploy/dashcam-agent.service "$ROOT$UNIT_DIR/dashcam-agent.service"
install -D -m 0644 deploy/70-dashcam-agent.rules "$ROOT$UDEV_DIR/rules.d/70-dashcam-agent.rules"
install -D -m 0644 device-config/default.yaml "$ROOT/etc/dashcam-agent/agent.yaml"
# `dashcam-agent setup` merges a board profile into the conffile; the package's defaults tell it
# which of the conffile's values the user changed.
install -D -m 0644 device-config/default.yaml "$ROOT/usr/share/dashcam-agent/default.yaml"
install -D -m 0644 deploy/chrony/dashcam-gps.conf "$ROOT/usr/share/dashcam-agent/chrony/dashcam-gps.conf"
for board in device-config/boards/*.yaml; do
    install -D -m 0644 "$board" "$ROOT/usr/share/dashcam-agent/boards/$(basename "$board")"
done
install -D -m 0644 README.md "$ROOT/usr/share/doc/dashcam-agent/README.md"
install -D -m 0644 deploy/debian/README.Debian "$ROOT/usr/share/doc/dashcam-agent/README.Debian"
install -D -m 0644 device-config/README.md "$ROOT/usr/share/doc/dashcam-agent/CONFIG.md"
install -D -m 0644 deploy/copyright "$ROOT/usr/share/doc/dashcam-agent/copyright"
install -D -m 0644 deploy/recording-dir.conf "$ROOT/usr/share/doc/dashcam-agent/examples/recording-dir.conf"
gzip -9n < deploy/debian/changelog > "$ROOT/usr/share/doc/dashcam-agent/changelog.gz"
chmod 0644 "$ROOT/usr/share/doc/dashcam-agent/changelog.gz"
install -D -m 0644 deploy/debian/lintian-overrides "$ROOT/usr/share/lintian/overrides/dashcam-agent"

# The shared libraries' packages, read from the binary by dpkg-shlibdeps against the symbols files
# of the release it is built on, as Debian's own packages get theirs: Debian 12 gives
# libavcodec59 and libgpiod2, Debian 13 libavcodec61 and libgpiod3. A binary built elsewhere may
# load libraries no package holds (a debug build's Swift runtime, which a release build links
# statically): those are left out.
shlibs=$(mktemp -d)
mkdir "$shlibs/debian"
printf 'Source: dashcam-agent\n\nPackage: dashcam-agent\nArchitecture: any\n' > "$shlibs/debian/control"
LIBRARIES=$(cd "$shlibs" && dpkg-shlibdeps -O --ignore-missing-info "$ROOT/usr/bin/dashcam-agent" "$VISION" | sed -n 's/^shlibs:Depends=//p')
rm -rf "$shlibs"
[ -n "$LIBRARIES" ] || { echo "build-deb: dpkg-shlibdeps found no libraries" >&2; exit 1; }
# Packed relocations (DT_RELR) need glibc 2.36, which Debian 12's symbols file does not say.
if readelf -d "$ROOT/usr/bin/dashcam-agent" | grep -q '(RELR)'; then
    libc=$(sed -n 's/.*libc6 (>= \([^)]*\)).*/\1/p' <<<"$LIBRARIES")
    if [ -n "$libc" ] && dpkg --compare-versions "$libc" lt 2.36; then
        LIBRARIES=${LIBRARIES/"libc6 (>= $libc)"/"libc6 (>= 2.36)"}
    fi
fi

mkdir -p "$ROOT/DEBIAN"
cat > "$ROOT/DEBIAN/control" <<CONTROL
Package: dashcam-agent
Version: $VERSION
Architecture: $ARCH
Installed-Size: $(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
Maintainer: $MAINTAINER
Section: video
Priority: optional
Depends: adduser, espeak-ng-data, $LIBRARIES
Recommends: v4l-utils, gpiod, alsa-utils
Description: dashcam agent: records a camera, streams it for driver guidance
 Captures a V4L2 camera, encodes 5-second HEVC segments and keeps a loop
 recording of them, streams them over WebSocket to a guidance server, speaks
 the guidance with eSpeak-ng and pulses a GPIO vibration motor when the road is
 clear. Runs as a systemd service with a watchdog.
CONTROL
echo /etc/dashcam-agent/agent.yaml > "$ROOT/DEBIAN/conffiles"
install -m 0755 deploy/debian/postinst "$ROOT/DEBIAN/postinst"
install -m 0755 deploy/debian/prerm "$ROOT/DEBIAN/prerm"
install -m 0755 deploy/debian/postrm "$ROOT/DEBIAN/postrm"

mkdir -p "$OUT"
DEB="$OUT/dashcam-agent_${VERSION}_${ARCH}.deb"
dpkg-deb --root-owner-group -Z"${DEB_COMPRESSION:-xz}" --build "$ROOT" "$DEB" >/dev/null
echo "$DEB"
