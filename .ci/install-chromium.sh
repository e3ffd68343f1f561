#!/usr/bin/env bash
# Headless Chromium for the report's browser test (tests/integration/test_report_chromium.py), from the Debian packages.
# Skips when a chromium is already on PATH. Downloaded .debs stay in apt's cache (/var/cache/apt/archives),
# which a CI runner may keep between runs; the package lists are refreshed only when older than a day.
# Never fatal: without Chromium the browser test skips and says why.
set -uo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
        echo "install-chromium: not root and no passwordless sudo; the browser test will skip" >&2; exit 0
    fi
fi
lists=/var/lib/apt/lists
if [ -z "$(find "$lists" -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
    $sudo apt-get update -qq || echo "install-chromium: apt-get update failed" >&2
fi
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core \
    >/dev/null || echo "install-chromium: apt-get install chromium failed; the browser test will skip" >&2
exit 0
