#!/usr/bin/env bash
# The fused attention and layer norm kernels and the transformer training
# benchmark, on a GPU machine, in one call of under ten minutes: build the
# core and the CUDA plugin, then run
#   - tests/test_transformer_ops.py (GPU kernels against numpy and against
#     the composed form on the GPU, every dtype, causal and masked, odd
#     sequence lengths, head dims 24/64/128; attention on both its cuBLAS
#     path and its memory-efficient kernels, which must agree),
#   - compute-sanitizer's memcheck over a few of those cases,
#   - benchmarks/transformer_gpu.py (pluggable composite / fused / traced
#     beside PyTorch eager and torch.compile, fp32, bf16, tf32).
# Logs go to OUTDIR (default /tmp/gpu_transformer_check); a summary is
# printed last.
#
#   bash benchmarks/gpu_transformer_check.sh [OUTDIR] [BENCHMARK ARGS...]
#
# PLUGGABLE_CUDA_ARCHS picks the GPU architectures (default 90, the H100).
set -u
OUT=${1:-/tmp/gpu_transformer_check}
shift || true
source "$(dirname "$0")/gpu_prelude.sh"

t0=$SECONDS
timeout 240 python3 -m pytest -q -rs --maxfail=10 -p no:cacheprovider \
  tests/test_transformer_ops.py > "$OUT/tests.log" 2>&1
summary "tests" "rc=$? $((SECONDS - t0))s $(tail -1 "$OUT/tests.log")"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20

if command -v compute-sanitizer >/dev/null; then
  t0=$SECONDS
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
    python3 -m pytest -q -x -p no:cacheprovider tests/test_transformer_ops.py \
      -k "gpu and float32 and (both or plain) and 24 or gpu_layer_norm and float16 or paths_agree and float16 and heads and True" \
      > "$OUT/memcheck.log" 2>&1
  summary "memcheck" "rc=$? $((SECONDS - t0))s $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
fi

t0=$SECONDS
left=$((570 - SECONDS)); [ $left -lt 30 ] && left=30
timeout $left python3 benchmarks/transformer_gpu.py --modes fp32,bf16,tf32 \
  --json "$OUT/bench.json" "$@" > "$OUT/bench.txt" 2>&1
summary "benchmark" "rc=$? $((SECONDS - t0))s"
grep -v -i warn "$OUT/bench.txt" | tail -25
echo; cat "$OUT/summary.txt"
