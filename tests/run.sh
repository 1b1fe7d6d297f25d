#!/usr/bin/env bash
# The whole test suite, from a fresh clone: creates .venv, installs the kit
# with everything it needs, then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# The browser tests drive Debian's Chromium, headless and offline; every run of a lab file is
# sandboxed by Debian's bubblewrap (see `proflab doctor`).
missing=()
{ [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; } || missing+=(chromium chromium-driver)
command -v bwrap >/dev/null || missing+=(bubblewrap)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "Installing Debian's ${missing[*]} for the tests…"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "note: missing ${missing[*]}: the browser tests are skipped, and runs go unsandboxed (outside CI)"
  fi
fi
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
exec .venv/bin/python -m pytest "$@"
