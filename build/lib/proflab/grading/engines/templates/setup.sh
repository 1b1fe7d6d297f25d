#!/usr/bin/env bash
# Written by `proflab autograder gradescope` (proflab $version, $made): Gradescope runs it once, as root, in
# /autograder/source, when it builds this autograder's image. It installs Python's venv, bubblewrap (the
# sandbox every run of a learner's file runs in) and the kit with torch's $torch_what, then builds the labs'
# data, so that no submission waits for any of it.
set -euo pipefail
cd "$$(dirname "$$0")"
SOURCE="$$PWD"
VENV=/autograder/venv

missing=()
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v setpriv >/dev/null || missing+=(util-linux)
if [ $${#missing[@]} -gt 0 ]; then
  echo "Installing $${missing[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$${missing[@]}"
fi

python3 -m venv "$$VENV"
pip() { "$$VENV/bin/python" -m pip --disable-pip-version-check --no-input "$$@"; }
echo "Installing torch and torchvision ($torch_what)"
pip install --quiet $torch_args torchvision
echo "Installing proflab $version"
pip install --quiet "$$SOURCE/proflab"

export PROFLAB_ROOT="$$SOURCE/proflab"
echo "Building the labs' data"
"$$VENV/bin/proflab" data
# What runs here: whether a learner's runs are sandboxed (and why not), torch, the device. Read it in the
# autograder's build log.
"$$VENV/bin/proflab" doctor || true
echo "The autograder is ready: labs $labs"
