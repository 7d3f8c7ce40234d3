#!/usr/bin/env bash
# One lease of a lent GPU (issue 61), inside a hard deadline: build the CUDA core, the CUDA tier and the
# device tests, every compiled op against its torch path on the card (the dispatch evidence), the GPU
# benchmarks (hyper, policies with kornia where its wheels travel in .whl/, measurement), CUDA smoke runs,
# then the default suite spread over the cores. Every step has its own time limit and the whole run stops
# before DEADLINE seconds; logs go to $OUT as one archive (the device tool returns at most 8 files).
#
#   OUT=/tmp/out DEADLINE=400 bash scripts/gpu_lease.sh [step ...]     # default: every step, in order
#
# Steps: env build backend cuda-tier devices augment bench-ops bench-gpu smoke suite rehearsal
#        build-onecc (not in the default list: rebuild with the system gcc/g++ for every source, then the two
#        tests that crashed in error paths of the 2026-12-04 build, docs/gpu.md)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
export MAX_JOBS="${MAX_JOBS:-16}" PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-$(mktemp -d -t invfast-lease.XXXXXX)}"
LOG="$OUT/logs"
mkdir -p "$LOG"
DEADLINE="${DEADLINE:-400}"
T0=$(date +%s)
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(env build backend cuda-tier devices bench-ops bench-gpu smoke suite rehearsal)
SUMMARY=()
PYTEST=("$PY" -m pytest -p no:cacheprovider -o addopts="" -q -rfE)

left() { echo $((DEADLINE - ($(date +%s) - T0))); }

# run NAME LIMIT CMD...: CMD under min(LIMIT, time left), output in $LOG/NAME.log; one summary row
run() {
    local name="$1" limit="$2" l rc t0 detail
    shift 2
    l=$(left)
    if [ "$l" -lt 20 ]; then SUMMARY+=("$(printf '%-14s %-9s %6s  %s' "$name" skipped - "deadline")"); return; fi
    [ "$limit" -gt "$l" ] && limit=$l
    echo "==> $name (<= ${limit}s): $*"
    t0=$(date +%s)
    timeout -k 5 "$limit" "$@" >"$LOG/$name.log" 2>&1
    rc=$?
    detail=$(grep -aE "[0-9]+ (passed|failed)|[0-9]+ error" "$LOG/$name.log" | tail -n 1 | sed -E 's/^=+ //; s/ =+$//')
    [ "$rc" -eq 124 ] && detail="TIMED OUT ${detail}"
    SUMMARY+=("$(printf '%-14s %-9s %6s  %s' "$name" "$([ $rc -eq 0 ] && echo ok || echo "FAIL($rc)")" \
        "$(($(date +%s) - t0))" "${detail:0:90}")")
    if [ "$rc" -ne 0 ]; then grep -aE "^(FAILED|ERROR)|Error|error:" "$LOG/$name.log" | head -n 12; fi
}

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi

DATA="synthetic:objects=4,n=64,size=32,seed=0"
for s in "${STEPS[@]}"; do
    case "$s" in
    env)
        run env 30 bash -c "nvidia-smi; $PY -c 'import torch,sys; print(sys.version); print(torch.__version__, \
torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))'; nvcc --version; \
$PY -c 'import kornia; print(\"kornia\", kornia.__version__)'"
        cat "$LOG/env.log" | head -n 30 ;;
    build) run build 150 "$PY" setup.py build_ext --inplace ;;
    build-onecc)
        run build-onecc 150 env CC=gcc CXX=g++ LDSHARED="g++ -shared" "$PY" setup.py build_ext --inplace --force
        run onecc-errors 60 "$PY" -X faulthandler -m pytest -p no:cacheprovider -o addopts="" -q -rfE \
            tests/test_augment_views.py::test_order_must_be_a_permutation \
            tests/measure/test_measure_units.py::test_merged_unit_moments_bad_inputs_and_half_precision ;;
    backend)
        run backend 30 "$PY" -c "import invfast, json; i = invfast.backend_info(); print(json.dumps(i, default=str)); \
assert i.get('cuda'), 'invfast._C was built without CUDA'" ;;
    cuda-tier) run cuda-tier 120 "${PYTEST[@]}" tests -m cuda -n 8 --timeout 100 ;;
    devices)
        run devices 120 "${PYTEST[@]}" tests/test_devices.py tests/test_augment_views.py tests/probes/test_probes.py \
            tests/test_hyper_resnet.py -n 8 --timeout 100 ;;
    augment)  # the augment tests alone, in order; a crash gets a native backtrace (cuda-gdb debugs host code too)
        run augment 60 "$PY" -X faulthandler -m pytest -p no:cacheprovider -o addopts="" -q -rfE tests/test_augment_views.py
        if grep -aq "Fatal Python error" "$LOG/augment.log"; then
            run augment-bt 90 cuda-gdb -batch -ex "set pagination off" -ex run -ex "thread apply all bt 25" --args \
                "$PY" -m pytest -p no:cacheprovider -o addopts="" -q -x tests/test_augment_views.py
            grep -a -A40 "SIGSEGV" "$LOG/augment-bt.log" | head -n 60
        fi ;;
    bench-ops)
        cp invfast/dispatch_evidence.json "$OUT/dispatch_evidence.json"
        INVFAST_DISPATCH_EVIDENCE="$OUT/dispatch_evidence.json" run bench-ops 120 "${PYTEST[@]}" \
            benchmarks/bench_ops.py -k cuda --benchmark-only -s --benchmark-json="$OUT/bench_ops.json" ;;
    bench-gpu)
        run bench-gpu 200 "${PYTEST[@]}" benchmarks/bench_hyper.py benchmarks/bench_policies.py \
            benchmarks/bench_measure.py benchmarks/bench_pretrain.py benchmarks/bench_transforms.py \
            -k "GPU or gpu or cuda" --benchmark-only -s --benchmark-json="$OUT/bench_gpu.json" ;;
    smoke)
        run smoke 120 bash -c "set -e; $PY -m invfast measure --model resnet18-cifar --data '$DATA' --images 64 \
--grid-size 8 --transforms all --device cuda --out $OUT/tmp/measure --no-progress --overwrite; \
for m in mocov2 simclr ai-moco; do $PY -m invfast pretrain --method \$m --data '$DATA' --arch resnet18-cifar \
--width 8 --size 32 --steps 6 --batch-size 16 --device cuda --out $OUT/tmp/pretrain-\$m --no-progress; done; \
$PY -m invfast pretrain --method mocov2 --data '$DATA' --arch resnet18-cifar --width 8 --size 32 --steps 4 \
--batch-size 16 --device cuda --amp --out $OUT/tmp/pretrain-amp --no-progress" ;;
    rehearsal)
        run rehearsal 150 bash -c "set -e; $PY scripts/imagenet_rehearsal.py write --out /tmp/rehearsal --n ${REHEARSAL_N:-2048} \
--workers 16; $PY scripts/imagenet_rehearsal.py time --data /tmp/rehearsal --model resnet50 --device cuda \
--images ${REHEARSAL_N:-2048} --grid-size 16 --workers 8" ;;
    suite) run suite 150 "${PYTEST[@]}" tests -n 14 --timeout 120 -m "not slow" ${SUITE_ARGS:-} ;;
    *) echo "unknown step $s"; exit 2 ;;
    esac
done

rm -rf "$OUT/tmp"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOG"
echo
echo "invfast GPU lease: $(date -u +%FT%TZ), $(($(date +%s) - T0)) s of ${DEADLINE}"
printf '%-14s %-9s %6s  %s\n' step result s details
printf '%s\n' "${SUMMARY[@]}"
