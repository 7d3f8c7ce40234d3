#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment in .venv with torch and invfast installed editable
# with its compiled core.
#
# Which torch: `pip install torch==X` takes whatever build the configured index serves for this
# machine. On Linux x86_64, PyPI serves the CUDA build (several GB; the compiled core then includes
# the CUDA kernels when nvcc/CUDA_HOME is present); machines with a local CPU wheel, or an index that
# serves one, get the CPU build. To choose the CPU build on a plain machine, point
# INVFAST_TORCH_INDEX at PyTorch's CPU wheel index (see the install selector on pytorch.org).
# INVFAST_TORCH_VERSION picks the version (tested: 2.11 and 2.13).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip() { .venv/bin/python -m pip "$@"; }
pip install -q --upgrade pip setuptools wheel
pip install -q "torch==${INVFAST_TORCH_VERSION:-2.13.0}" ${INVFAST_TORCH_INDEX:+--index-url "$INVFAST_TORCH_INDEX"}
pip install -q ninja pybind11
# --no-build-isolation: build against the torch installed above (an isolated build would fetch another one)
pip install -q --no-build-isolation -e ".[dev]"
.venv/bin/python -c "import invfast; print('invfast', invfast.__version__, '- compiled core:', invfast.backend_info()['cpp'])"
