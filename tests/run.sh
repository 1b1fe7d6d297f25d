#!/usr/bin/env bash
# The whole test suite, from a fresh clone: creates .venv, installs the kit
# with everything it needs, then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
exec .venv/bin/python -m pytest "$@"
