#!/usr/bin/env bash
# Host<->device copies of the CUDA plugin on a GPU machine, in about two
# minutes after the build: build the core and the CUDA plugin, then run
#   - tests/test_gpu_copies.py (staged and pinned round trips around the chunk
#     boundaries, every dtype, two streams, stream order against kernels, Fill,
#     the copy stream) and the copy and Fill tests of tests/test_gpu_runtime.py
#     (1 GiB copies included),
#   - compute-sanitizer's memcheck over the staged-copy tests (when installed),
#   - benchmarks/bench_copies_gpu.py (1/16/256 MiB, pageable and pinned, both
#     directions, against torch and cupy),
#   - benchmarks/copy_overlap_gpu.py (batches streamed while computing),
#   - the transfer and allocation rows of benchmarks/bench_gpu.py (Fill).
# Logs and JSON go to OUTDIR (default /tmp/gpu_copies_check); a summary is
# printed last.
#
#   bash benchmarks/gpu_copies_check.sh [OUTDIR]
#
# PLUGGABLE_CUDA_ARCHS picks the GPU architectures (default 90, the H100).
set -u
OUT=${1:-/tmp/gpu_copies_check}
source "$(dirname "$0")/gpu_prelude.sh"

t0=$SECONDS
timeout 100 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_copies.py \
  > "$OUT/tests.log" 2>&1
summary "copy tests" "rc=$? $((SECONDS - t0))s $(tail -1 "$OUT/tests.log")"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
t0=$SECONDS
timeout 90 python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_runtime.py \
  -k "copies or fill" > "$OUT/runtime_tests.log" 2>&1
summary "runtime copy tests" "rc=$? $((SECONDS - t0))s $(tail -1 "$OUT/runtime_tests.log")"
grep -E "^(FAILED|ERROR)" "$OUT/runtime_tests.log" | head -20

if command -v compute-sanitizer >/dev/null; then
  t0=$SECONDS
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
    python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu_copies.py \
      -k "promises or interleaved" > "$OUT/memcheck.log" 2>&1
  summary "memcheck" "rc=$? $((SECONDS - t0))s $(grep -E 'ERROR SUMMARY|passed|failed' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
fi

t0=$SECONDS
timeout 90 python3 benchmarks/bench_copies_gpu.py --quick --json "$OUT/copies.json" \
  > "$OUT/copies.txt" 2>&1
summary "copy bench" "rc=$? $((SECONDS - t0))s"
cat "$OUT/copies.txt"
t0=$SECONDS
timeout 90 python3 benchmarks/copy_overlap_gpu.py --json "$OUT/overlap.json" \
  > "$OUT/overlap.txt" 2>&1
summary "overlap bench" "rc=$? $((SECONDS - t0))s"
cat "$OUT/overlap.txt"
t0=$SECONDS
timeout 90 python3 benchmarks/bench_gpu.py --quick --only transfers,alloc \
  --json "$OUT/bench_gpu.json" > "$OUT/bench_gpu.txt" 2>&1
summary "bench_gpu rows" "rc=$? $((SECONDS - t0))s"
cat "$OUT/bench_gpu.txt"
echo
cat "$OUT/summary.txt"
