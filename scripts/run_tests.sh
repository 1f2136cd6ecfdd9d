#!/usr/bin/env bash
# Set up (a local .venv with the test extra) and run the whole test suite, in parallel.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
targets=(tests)
# The seed acceptance tests live beside the checkout when it sits in the workspace.
if [ -d ../shared/acceptance ]; then targets+=(../shared/acceptance); fi
exec .venv/bin/python -m pytest -n 2 -p no:cacheprovider "${targets[@]}" "$@"
