#!/usr/bin/env bash
# The whole test suite, from a fresh clone: creates .venv, installs the kit
# with everything it needs, then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# The browser tests drive Debian's Chromium, headless and offline.
if ! { [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; }; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "Installing Debian's chromium and chromium-driver for the browser tests…"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "note: without /usr/bin/chromium and /usr/bin/chromedriver the browser tests are skipped (outside CI)"
  fi
fi
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
exec .venv/bin/python -m pytest "$@"
