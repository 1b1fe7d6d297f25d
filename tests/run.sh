#!/usr/bin/env bash
# The whole test suite, from a fresh clone: creates .venv, installs the kit
# with everything it needs, then runs pytest (the quick tier first). Extra arguments go to pytest;
# --quick runs the quick tier alone.
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
# Tests that measure nothing run on two workers (pytest-xdist), a module to a worker; PROFLAB_TEST_WORKERS=0
# runs them in this process, one after another.
workers=(-n "${PROFLAB_TEST_WORKERS:-2}" --dist loadfile)
if [ "${1:-}" = "--quick" ]; then  # the quick tier alone (tests/conftest.py says what is in it)
  shift
  exec .venv/bin/python -m pytest -m quick "${workers[@]}" "$@"
fi
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# The whole suite: the quick tier first, stopping at its first failure, so a broken change fails in
# minutes; then the slow tests that measure no speed, on two workers; then those that do, one at a time
# on a machine left to them (tests/conftest.py, MEASURED_MODULES). Every phase runs; the first failure's
# status is the suite's.
.venv/bin/python -m pytest -m quick -x "${workers[@]}"
status=0
# (its two workers' checks do not take turns at the machine with each other: nothing there rests on a speed)
PROFLAB_TEST_OWN_SLOTS=1 .venv/bin/python -m pytest -m "not quick and not measured" "${workers[@]}" || status=$?
.venv/bin/python -m pytest -m "measured" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
exit "$status"
