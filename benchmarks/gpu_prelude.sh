# Sourced by the GPU check scripts (benchmarks/gpu_*_check.sh) after they set
# OUT: makes OUT, moves to the repository root, installs the wheels a GPU
# machine lacks from .whl/ (cffi, pycparser, protobuf) into /tmp/pg-site,
# defines `summary NAME TEXT` (appended to $OUT/summary.txt and printed),
# records the GPUs and builds the core and the plugins in place (exits 1 with
# the end of the build log when the build fails), or unpacks what was built
# beforehand on another machine into .gpu-carry/built.tar.xz (the build's
# outputs: pluggable/_core/_lib*.so, the plugins, the ORT bridge, the headers
# and the *_pb2.py modules) where that file exists.
# PLUGGABLE_CUDA_ARCHS picks the GPU architectures (default 90, the H100).
mkdir -p "$OUT"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1
export PLUGGABLE_CUDA_ARCHS=${PLUGGABLE_CUDA_ARCHS:-90}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pg-site .whl/*.whl
  export PYTHONPATH=/tmp/pg-site:$PWD
else
  export PYTHONPATH=$PWD
fi
: > "$OUT/summary.txt"
summary() { printf '%-26s %s\n' "$1" "$2" | tee -a "$OUT/summary.txt"; }
nvidia-smi -L > "$OUT/nvidia-smi.txt" 2>&1

t0=$SECONDS
if [ -f .gpu-carry/built.tar.xz ]; then
  # built here beforehand (core, plugins, headers, protobuf modules) and carried
  python3 -c "import tarfile; tarfile.open('.gpu-carry/built.tar.xz').extractall('.', filter='data')" \
    > "$OUT/build.log" 2>&1
  rc=$?
  summary "build (carried)" "rc=$rc $((SECONDS - t0))s"
else
  { timeout 120 python3 setup.py -q build_ext --inplace \
      && timeout 300 python3 reference_device/cuda/setup.py --plugin-into pluggable/plugins; } \
    > "$OUT/build.log" 2>&1
  rc=$?
  summary "build" "rc=$rc $((SECONDS - t0))s"
fi
if [ $rc -ne 0 ]; then tail -40 "$OUT/build.log"; exit 1; fi
