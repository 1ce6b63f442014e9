#!/usr/bin/env bash
# The CUDA plugin's matrix-vector path (MatMul / _FusedMatMul with at most 8
# rows), on a GPU machine, in a few minutes: build the core and the CUDA
# plugin, then run
#   - tests/test_gpu_gemv.py (numpy, the cuBLAS path, traced and captured MLP,
#     kernel names under CUPTI) and the existing GPU fusion/capture tests,
#   - compute-sanitizer's memcheck and racecheck over the raw-op tests,
#   - benchmarks/gemv_gpu.py (per layer against cuBLAS and torch linear),
#   - benchmarks/graph_gpu.py at batch 1 (the traced MLP against PyTorch),
#   - benchmarks/gemv_chain_gpu.cu (outside the framework: the MLP's chain
#     as one launch per layer against one persistent launch).
# Logs go to OUTDIR (default /tmp/gpu_gemv_check); a summary is printed last.
#
#   bash benchmarks/gpu_gemv_check.sh [OUTDIR]
#
# PLUGGABLE_CUDA_ARCHS picks the GPU architectures (default 90, the H100).
set -u
OUT=${1:-/tmp/gpu_gemv_check}
export PLUGGABLE_CUDA_GEMV=1  # the matrix-vector path (the default)
source "$(dirname "$0")/gpu_prelude.sh"

TESTS="tests/test_gpu_gemv.py"
for t in tests/test_fusion.py tests/test_graph_capture.py; do [ -f "$t" ] && TESTS="$TESTS $t"; done
t0=$SECONDS
timeout 240 python3 -m pytest -q -rs -p no:cacheprovider $TESTS > "$OUT/tests.log" 2>&1
rc=$?
summary "tests" "rc=$rc $((SECONDS - t0))s $(tail -1 "$OUT/tests.log")"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
grep -E "^SKIPPED.*gemv" "$OUT/tests.log" | head -5

if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    t0=$SECONDS
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 --print-limit 20 \
      python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu_gemv.py \
        -k "matches_numpy and (1 or 9)" > "$OUT/$tool.log" 2>&1
    rc=$?
    summary "$tool" "rc=$rc $((SECONDS - t0))s $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed|failed' "$OUT/$tool.log" | tail -2 | tr '\n' ' ')"
  done
fi

t0=$SECONDS
timeout 240 python3 benchmarks/gemv_gpu.py --json "$OUT/gemv.json" > "$OUT/gemv.txt" 2>&1
summary "gemv bench" "rc=$? $((SECONDS - t0))s"
cat "$OUT/gemv.txt"
t0=$SECONDS
timeout 240 python3 benchmarks/graph_gpu.py --device GPU:0 --batches 1 \
  --json "$OUT/graph.json" > "$OUT/graph.txt" 2>&1
summary "graph bench" "rc=$? $((SECONDS - t0))s"
cat "$OUT/graph.txt"
t0=$SECONDS
{ nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 benchmarks/gemv_chain_gpu.cu \
    -o "$OUT/gemv_chain" && timeout 60 "$OUT/gemv_chain"; } > "$OUT/gemv_chain.txt" 2>&1
summary "gemv chain probe" "rc=$? $((SECONDS - t0))s"
cat "$OUT/gemv_chain.txt"
echo
cat "$OUT/summary.txt"
