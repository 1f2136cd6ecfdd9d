#!/usr/bin/env bash
# Set up (a local .venv with the examples extra) and run the main job.
#   bash scripts/run_main.sh [ARGS...]          train a CNN on digits (examples/train_digits.py)
#   bash scripts/run_main.sh digits [ARGS...]   the same
#   bash scripts/run_main.sh charlm [ARGS...]   train a character-level Transformer LM on the
#                                               stdlib's source (examples/train_charlm.py, < 3 min)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[examples]'
example=digits
if [ $# -gt 0 ] && { [ "$1" = digits ] || [ "$1" = charlm ]; }; then
  example=$1
  shift
fi
exec .venv/bin/python "examples/train_${example}.py" "$@"
