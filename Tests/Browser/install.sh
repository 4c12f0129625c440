#!/usr/bin/env bash
# What the owners' pages test needs, on the machine that runs it (Debian 12; not in the Debian 13
# build root, which has no browser test): Debian's Chromium and its driver, gpsd (the car's GPS), a
# font with Hangul, kana and Han (the Korean and Japanese pages' screenshots),
# and from PyPI, pinned: Selenium (4.51 is the last that takes the certifi Debian's pip sees) and
# selenium-axe-python (axe-core 4.9 inside; without its dependencies, which would move Selenium).
# Selenium is pointed at the system's chromedriver, so nothing else is downloaded. Idempotent.
set -euo pipefail
bash "$(dirname "${BASH_SOURCE[0]}")/../../scripts/install-deps.sh" chromium chromium-driver gpsd fonts-wqy-zenhei
python3 -c 'import selenium, sys; sys.exit(selenium.__version__ != "4.51.0")' 2>/dev/null \
    || python3 -m pip install -q --disable-pip-version-check "selenium==4.51.0"
python3 -c 'import selenium_axe_python' 2>/dev/null \
    || python3 -m pip install -q --disable-pip-version-check --no-deps "selenium-axe-python==2.2.0"
