#!/usr/bin/env bash
# One session on a GPU machine: build (unless built artifacts were carried),
# demo, the whole test suite (GPU tests included), a compute-sanitizer
# memcheck subset, the conformance check of the CUDA plugin, and the GPU
# benchmark. Every log goes to OUTDIR; a short summary is printed last.
#
#   bash benchmarks/gpu_session.sh OUTDIR [STAGE ...] [--quick-bench]
#
# STAGE is any of demo, tests, memcheck, check, bench (default: all of them).
# Wheels the machine lacks (cffi, pycparser) may be carried in .whl/.
set -u
OUT=${1:?usage: gpu_session.sh OUTDIR}; shift
STAGES=(); BENCH_ARGS=()
for a in "$@"; do
  case "$a" in --quick-bench) BENCH_ARGS+=(--quick) ;; *) STAGES+=("$a") ;; esac
done
[ ${#STAGES[@]} -eq 0 ] && STAGES=(demo tests memcheck check bench)
want() { [[ " ${STAGES[*]} " == *" $1 "* ]]; }
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pg-site .whl/*.whl
  export PYTHONPATH=/tmp/pg-site:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
if [ ! -f pluggable/_core/_lib.abi3.so ] || [ ! -f pluggable/plugins/libpluggable_cuda.so ]; then
  { python3 -m pip install -q --no-build-isolation --no-deps --no-index -e . \
      && python3 reference_device/cuda/setup.py --plugin-into pluggable/plugins; } \
    > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
fi
summary() { printf '%-28s %s\n' "$1" "$2" >> "$OUT/summary.txt"; }
: > "$OUT/summary.txt"
if want demo; then
  python3 -m pluggable > "$OUT/demo.txt" 2>&1; summary demo "rc=$?"
fi
if want tests; then
  timeout 300 python3 -m pytest -q -rs -p no:cacheprovider tests > "$OUT/tests.log" 2>&1
  summary "tests" "rc=$? $(tail -1 "$OUT/tests.log")"
fi
if want memcheck && command -v compute-sanitizer >/dev/null; then
  timeout 170 compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
    python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu_runtime.py \
      -k "not 1073741824 and not 268435456 and not huge" > "$OUT/memcheck_runtime.log" 2>&1
  summary "memcheck runtime" "rc=$? $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck_runtime.log" | tail -2 | tr '\n' ' ')"
  timeout 170 compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
    python3 -m pytest -q -x -p no:cacheprovider tests/test_ops.py -k "GPU and not large" \
      > "$OUT/memcheck_ops.log" 2>&1
  summary "memcheck ops" "rc=$? $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck_ops.log" | tail -2 | tr '\n' ' ')"
fi
if want check; then
  timeout 200 python3 -m pluggable check pluggable/plugins/libpluggable_cuda.so > "$OUT/check_cuda.txt" 2>&1
  summary "check cuda plugin" "rc=$? $(tail -1 "$OUT/check_cuda.txt")"
fi
if want bench; then
  timeout 400 python3 benchmarks/bench_gpu.py "${BENCH_ARGS[@]}" --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1
  summary "benchmark" "rc=$?"
  tail -45 "$OUT/bench.txt"
fi
echo; cat "$OUT/summary.txt"
