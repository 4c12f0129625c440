#!/usr/bin/env bash
# Lists a built package and checks it with the lintian of the release it is run on: no error, no
# warning that is not overridden with a reason. scripts/test.sh runs it on each release.
#
#     bash deploy/check-deb.sh DEB
set -euo pipefail
deb=${1:?usage: check-deb.sh DEB}
dpkg-deb --info "$deb"
dpkg-deb --contents "$deb"
lintian --fail-on error,warning "$deb"
