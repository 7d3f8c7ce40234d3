#!/usr/bin/env bash
# One command for a GPU machine: build the CUDA core in place against the installed torch, run the
# default suite and the CUDA tier, the GPU benchmarks, and CUDA smoke runs of measure / pretrain /
# reproduce; print a summary (pass/fail counts, timings). Exit status 0 only when every step passed.
#
#   bash scripts/gpu_check.sh            # from anywhere inside the checkout
#   PYTHON=/path/to/python bash scripts/gpu_check.sh
#
# Environment: CUDA_HOME (default /usr/local/cuda), TORCH_CUDA_ARCH_LIST (default 9.0: H100/H200),
# MAX_JOBS (default 16), PYTHON (default python3), OUT (scratch folder, default a fresh temp dir),
# SKIP_BUILD=1 to reuse an existing in-place build, SKIP_SUITE=1 to skip the default suite.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
export MAX_JOBS="${MAX_JOBS:-16}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$(mktemp -d -t invfast-gpu-check.XXXXXX)}"
mkdir -p "$OUT"
LOG="$OUT/logs"
mkdir -p "$LOG"

declare -a NAMES=() RESULTS=() TIMES=() DETAILS=()
FAILED=0

# step NAME CMD...: run CMD with its output in $LOG/NAME.log, record status, time and (for pytest) counts
step() {
    local name="$1"; shift
    local log="$LOG/$name.log" t0 t1 rc detail
    echo "==> $name: $*"
    t0=$(date +%s.%N)
    "$@" >"$log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    detail=$(grep -E "^(=+ )?[0-9]+ (passed|failed|error|skipped|deselected)|[0-9]+ (passed|failed)" "$log" | tail -n 1 \
             | sed -E 's/^=+ //; s/ =+$//')
    NAMES+=("$name"); TIMES+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')")
    DETAILS+=("${detail:-}")
    if [ "$rc" -eq 0 ]; then RESULTS+=("ok"); else RESULTS+=("FAIL($rc)"); FAILED=$((FAILED + 1)); tail -n 20 "$log"; fi
}

"$PYTHON" - <<'EOF' || { echo "torch with CUDA and a visible GPU are needed (torch.cuda.is_available() is False)"; exit 2; }
import sys, torch
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), GPU: "
      f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
sys.exit(0 if torch.cuda.is_available() else 1)
EOF

if [ "${SKIP_BUILD:-0}" != "1" ]; then
    step build "$PYTHON" setup.py build_ext --inplace
fi
step backend "$PYTHON" -c "import invfast, json; i = invfast.backend_info(); print(json.dumps(i, default=str)); \
assert i.get('cuda'), 'invfast._C was built without CUDA'"

PYTEST=("$PYTHON" -m pytest -q -p no:cacheprovider)
if [ "${SKIP_SUITE:-0}" != "1" ]; then
    step suite "${PYTEST[@]}" tests
fi
step cuda-tier "${PYTEST[@]}" tests -m cuda -rs
step benchmarks "${PYTEST[@]}" benchmarks --benchmark-only -o addopts="" -k "cuda or gpu" \
    --benchmark-json="$OUT/benchmarks.json"

DATA="synthetic:objects=4,n=64,size=32,seed=0"
step measure-cuda "$PYTHON" -m invfast measure --model resnet18-cifar --data "$DATA" --images 64 \
    --grid-size 8 --transforms all --device cuda --out "$OUT/measure" --no-progress --overwrite
for m in mocov2 simclr ai-moco; do
    step "pretrain-$m-cuda" "$PYTHON" -m invfast pretrain --method "$m" --data "$DATA" --arch resnet18-cifar \
        --width 8 --size 32 --steps 6 --batch-size 16 --device cuda --out "$OUT/pretrain-$m" --no-progress
done
step pretrain-amp-cuda "$PYTHON" -m invfast pretrain --method mocov2 --data "$DATA" --arch resnet18-cifar \
    --width 8 --size 32 --steps 4 --batch-size 16 --device cuda --amp --out "$OUT/pretrain-amp" --no-progress
step reproduce-tiny "$PYTHON" -m invfast reproduce --preset tiny --out "$OUT/reproduce" --no-progress

echo
echo "invfast GPU check: $(date -u +%FT%TZ), output in $OUT"
printf '%-22s %-10s %9s  %s\n' step result seconds details
for i in "${!NAMES[@]}"; do
    printf '%-22s %-10s %9s  %s\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${TIMES[$i]}" "${DETAILS[$i]}"
done
echo "$FAILED step(s) failed; logs in $LOG"
[ "$FAILED" -eq 0 ]
