#!/usr/bin/env bash
# Incremental (ninja) rebuild of the compiled core invfast._C for development.
# Serialised with a lock so that parallel builds never interleave, and the new .so is moved
# into place atomically so that running processes keep the one they loaded.
# First install: pip install --no-build-isolation -e .   (this script is for rebuilds after that).
set -euo pipefail
cd "$(dirname "$0")/.."
exec 9>/tmp/invfast-build.lock
flock 9
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
"$PY" setup.py -q build_ext --build-lib build/ext-lib --build-temp build/ext-temp >/tmp/invfast-build-$$.log 2>&1 || {
  tail -n 60 /tmp/invfast-build-$$.log; echo "build_ext failed (full log: /tmp/invfast-build-$$.log)"; exit 1; }
so=$(ls build/ext-lib/invfast/_C*.so)
cp "$so" "invfast/.$(basename "$so").tmp"
mv -f "invfast/.$(basename "$so").tmp" "invfast/$(basename "$so")"
echo "built $(basename "$so")"
