#!/usr/bin/env bash
# NCCL in the CUDA plugin, on a GPU machine, in under 210 s after the build:
#   - tests/test_nccl.py (world-size-1 communicators for every op and dtype,
#     the unique-id + init path, the missing-NCCL error; with 2+ GPUs the
#     collectives across GPUs, a participant that never arrives, peer copies),
#     plus tests/test_distribute.py and tests/test_cuda_registrations.py,
#   - benchmarks/bench_nccl.py (all-reduce bandwidth against
#     torch.distributed/NCCL on every GPU present),
#   - with 2+ GPUs, benchmarks/nccl_out_of_place_gpu.py (NCCL alone: an
#     out-of-place all-reduce against an in-place one).
# Logs go to OUTDIR (default /tmp/gpu_nccl_check); a summary is printed last.
#
#   bash benchmarks/gpu_nccl_check.sh [OUTDIR]
#
# PLUGGABLE_CUDA_ARCHS picks the GPU architectures (default 90, the H100).
set -u
OUT=${1:-/tmp/gpu_nccl_check}
source "$(dirname "$0")/gpu_prelude.sh"
python3 -c "import torch; print('torch', torch.__version__, 'NCCL', torch.cuda.nccl.version())" \
  > "$OUT/torch.txt" 2>&1
summary "torch" "$(tail -1 "$OUT/torch.txt")"

t0=$SECONDS
timeout 90 python3 -m pytest -q -rs -p no:cacheprovider tests/test_nccl.py \
  tests/test_distribute.py tests/test_cuda_registrations.py > "$OUT/tests.log" 2>&1
rc=$?
summary "tests" "rc=$rc $((SECONDS - t0))s $(tail -1 "$OUT/tests.log")"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
grep -E "^SKIPPED" "$OUT/tests.log" | head -8

t0=$SECONDS
timeout 55 python3 benchmarks/bench_nccl.py --seconds 0.1 --json "$OUT/nccl.json" \
  > "$OUT/nccl.txt" 2>&1
summary "nccl bench" "rc=$? $((SECONDS - t0))s"
cat "$OUT/nccl.txt"
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  t0=$SECONDS
  timeout 60 python3 benchmarks/nccl_out_of_place_gpu.py --json "$OUT/out_of_place.json" \
    > "$OUT/out_of_place.txt" 2>&1
  summary "nccl out of place" "rc=$? $((SECONDS - t0))s"
  cat "$OUT/out_of_place.txt"
fi
echo
cat "$OUT/summary.txt"
