#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment in .venv with torch (CPU build unless the
# machine's pip finds a CUDA one) and invfast installed editable with its compiled core.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip() { .venv/bin/python -m pip "$@"; }
pip install -q --upgrade pip setuptools wheel
pip install -q "torch==${INVFAST_TORCH_VERSION:-2.13.0}"
pip install -q ninja pybind11
# --no-build-isolation: build against the torch installed above (an isolated build would fetch another one)
pip install -q --no-build-isolation -e ".[test]"
.venv/bin/python -c "import invfast; print('invfast', invfast.__version__, '- compiled core:', invfast.backend_info()['cpp'])"
