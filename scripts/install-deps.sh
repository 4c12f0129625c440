#!/usr/bin/env bash
# Installs the C libraries the agent builds against and the tools its tests use, from Debian's
# packages; with packages named, those instead. Idempotent: does nothing when everything is present.
# Needs root (or sudo).
set -euo pipefail

PACKAGES=(
    pkg-config
    libavcodec-dev libavformat-dev libswscale-dev libavutil-dev   # HEVC encoding, MP4, decoding
    libv4l-dev v4l-utils                                          # camera
    libgpiod-dev libespeak-ng-dev espeak-ng-data libasound2-dev   # haptics, speech, sound
    sox espeak-ng                                                 # check speech audio: sox, and eSpeak-ng's own program for each phrase's length
    nginx openssl iproute2 curl                                   # the reverse proxy, its test certificates, network namespaces, upgrade checks
    ffmpeg                                                        # ffprobe checks every segment
    systemd                                                       # systemd-analyze checks the unit
    dpkg-dev lintian                                              # the .deb's library dependencies (dpkg-shlibdeps), its checks
    postgresql postgresql-client sqlite3                          # the server's fleet ledger (started by the tests), psql and sqlite3 check the ledgers
    libopencv-objdetect-dev opencv-doc                            # the vision analyzer's people detector; vtest.avi, footage it is tested on
    gpsd gpsbabel                                                 # a real gpsd fed NMEA by the GPS tests; gpsbabel reads the GPX sidecars
    python3-aiosmtpd                                              # a real SMTP server (STARTTLS, AUTH) for the server's impact mails
)

# Debian 13 moved systemd's and udev's pkg-config files (where units and rules go, which
# deploy/build-deb.sh asks) to systemd-dev, a package Debian 12 does not have; there udev's is in
# udev itself.
if apt-cache show systemd-dev >/dev/null 2>&1; then PACKAGES+=(systemd-dev); else PACKAGES+=(udev); fi
# Given packages instead (Tests/Browser/install.sh: the browser test's own).
[ $# -gt 0 ] && PACKAGES=("$@")

missing=()
for package in "${PACKAGES[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null)" = "install ok installed" ] || missing+=("$package")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
