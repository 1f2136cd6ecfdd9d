#!/usr/bin/env bash
# Set up (a local .venv with the examples extra) and run the main job: train a CNN on digits.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[examples]'
exec .venv/bin/python examples/train_digits.py "$@"
