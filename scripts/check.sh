#!/usr/bin/env bash
# What CI runs (and the README's test command): lint, format check and type check of invfast/, then the tests.
# Extra arguments go to pytest (e.g. -m slow, -k measure).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
[ -x "$BIN/python" ] || BIN=$(dirname "$(command -v python)")
"$BIN/ruff" check invfast tests benchmarks scripts
"$BIN/ruff" format --check invfast tests benchmarks scripts
"$BIN/mypy"
"$BIN/python" -m pytest "$@"
