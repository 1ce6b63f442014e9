"""GPU benchmark: pluggable (CUDA reference plugin) against PyTorch and CuPy.

Measures, in one process on GPU:0:
  1. eager dispatch latency (AddV2 on 1 element, Relu on 1024), us/op;
  2. host<->device bandwidth for 256 MiB, pinned and pageable, GB/s;
  3. AddV2 on 64 Mi float32 elements, GB/s (3 * 4 * N bytes per call);
  4. 8192^3 MatMul in float32, TF32, float16 and bfloat16, TFLOP/s;
  5. allocate + free of 1 MiB through each framework, us/op;
  6. DLPack round trips through a peer library (zero copy), each framework
     with the same peer (CuPy, PyTorch, and JAX where a CUDA build of it is
     installed), us/op;
  7. eager ops of a model's mix (bias add, reduction, softmax, cast, exp,
     transpose, small MatMul, conv2d, the MLP at batch 1/64/8192, read-back);
  8. the user-level calls of that mix (pg.reduce_sum, pg.cast, x @ w,
     pg.transpose, pg.reshape, pg.zeros, pg.nn.bias_add, pg.nn.softmax) on a
     64x64 float32 tensor, where the call's host cost is the figure.
Dispatch includes `a * b` and `a * 2.0` with a Python scalar.

The rows that time a framework's calls (sections 1, 3, 4, 5, 7 and 8) set
every framework up first and then time them in turns: each timed round runs
pluggable, PyTorch and CuPy once each, and a row's figure is each
framework's median over the rounds. A drift of the machine during a row (GPU
clocks, other work on the host) then weighs on every framework alike rather
than on whichever ran last. The table's last column gives pluggable's time
over PyTorch's round by round (lowest / median / highest): how far apart the
two are against how much one framework's time moves within the row.
Prints a markdown table (with each row's ratio to PyTorch) and optionally
writes the rows as JSON. Every section runs on its own: a failing one prints
its exception and the others still run.

usage: python benchmarks/bench_gpu.py [--quick] [--json PATH] [--only SECTIONS] [--plot PNG]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback

import numpy as np

from gpu_peers import cuda_cupy, cuda_torch, import_pluggable, median_time, times_in_turns
from user_calls import user_calls

pg, PG_IMPORT_ERROR = import_pluggable()
torch = cuda_torch()
cp, cupyx = cuda_cupy()

ROWS: list[dict] = []
HIGHER_IS_BETTER = {"GB/s": True, "TFLOP/s": True, "us/op": False}


def add_row(section: str, name: str, unit: str, pg_v=None, torch_v=None, cupy_v=None,
            note: str = "", rounds=None) -> None:
    """One row of the table. `rounds` (the result of ``interleaved``) adds
    the spread of pluggable's time over PyTorch's, round by round."""
    row = {"section": section, "name": name, "unit": unit, "pluggable": pg_v,
           "torch": torch_v, "cupy": cupy_v, "note": note}
    if rounds is not None:
        pairs = rounds.paired("pluggable", "torch")
        if pairs:
            row["round_time_ratios"] = pairs
    ROWS.append(row)


class Rounds(dict):
    """Median seconds of a run per framework (the dict), and every timed
    round's seconds in `samples` (framework -> list, one entry per round)."""

    def __init__(self, samples: dict):
        super().__init__({fw: statistics.median(ts) for fw, ts in samples.items() if ts})
        self.samples = samples

    def paired(self, a: str, b: str) -> list:
        """a's time over b's in each round both ran, sorted."""
        sa, sb = self.samples.get(a), self.samples.get(b)
        if not sa or not sb or len(sa) != len(sb):
            return []
        return sorted(x / y for x, y in zip(sa, sb) if y > 0)


def interleaved(label: str, makers: dict, repeats: int, warmup: int = 1) -> Rounds:
    """Median seconds of one run per framework, the frameworks taking turns.

    `makers` maps a framework ("pluggable", "torch", "cupy") to a function
    that sets its case up and returns the run to time (a callable that ends
    with the framework's synchronisation), or to None where the framework is
    absent. After `warmup` untimed rounds, each of `repeats` rounds times every
    framework's run once, in turn, the first framework of a round moving
    on by one each round. A framework whose setup or run fails is
    printed and left out of the result. The result also keeps each round's
    times (``Rounds``)."""
    runs = {}
    for fw, make in makers.items():
        run = guarded(f"{fw} {label}", make) if make is not None else None
        if run is not None:
            runs[fw] = run

    def failed(fw, exc):
        print(f"[{fw} {label}] failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    return Rounds(times_in_turns(runs, repeats, warmup, on_error=failed))


def frameworks(pg_make=None, torch_make=None, cupy_make=None) -> dict:
    """The makers of `interleaved`, each kept only where its framework is
    importable here."""
    return {"pluggable": pg_make if pg else None, "torch": torch_make if torch else None,
            "cupy": cupy_make if cp else None}


def ran(loop, sync):
    """The run of `loop` followed by `sync`."""
    def run():
        loop()
        sync()
    return run


def guarded(label: str, fn):
    """Runs one measurement; prints and swallows its exception (None then)."""
    try:
        return fn()
    except Exception as exc:
        print(f"[{label}] failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def torch_sync():
    torch.cuda.synchronize()


def cupy_sync():
    cp.cuda.runtime.deviceSynchronize()


def gpu_scope():
    return pg.device("GPU:0")


# --- 1. dispatch latency --------------------------------------------------------

def bench_dispatch(quick: bool) -> None:
    n_calls = 2000 if quick else 20000
    repeats = 5

    for label, size, op in [("AddV2, 1 float32", 1, "add"), ("Relu, 1024 float32", 1024, "relu"),
                            ("a * b, 1 float32", 1, "mul"),
                            ("a * 2.0 (Python scalar), 1 float32", 1, "scalar")]:
        host = np.ones(size, np.float32)

        def pg_case():
            with gpu_scope():
                a, b = pg.constant(host), pg.constant(host)
                if op == "add":
                    def loop():
                        with gpu_scope():
                            for _ in range(n_calls):
                                pg.raw_ops.AddV2(x=a, y=b)
                elif op == "mul":
                    def loop():
                        with gpu_scope():
                            for _ in range(n_calls):
                                a * b
                elif op == "scalar":
                    def loop():
                        with gpu_scope():
                            for _ in range(n_calls):
                                a * 2.0
                else:
                    def loop():
                        with gpu_scope():
                            for _ in range(n_calls):
                                pg.raw_ops.Relu(features=a)
            return ran(loop, pg.synchronize)

        def torch_case():
            a = torch.ones(size, dtype=torch.float32, device="cuda")
            b = torch.ones(size, dtype=torch.float32, device="cuda")
            if op == "add":
                def loop():
                    for _ in range(n_calls):
                        a + b
            elif op == "mul":
                def loop():
                    for _ in range(n_calls):
                        a * b
            elif op == "scalar":
                def loop():
                    for _ in range(n_calls):
                        a * 2.0
            else:
                def loop():
                    for _ in range(n_calls):
                        torch.relu(a)
            return ran(loop, torch_sync)

        def cupy_case():
            a = cp.ones(size, dtype=cp.float32)
            b = cp.ones(size, dtype=cp.float32)
            if op == "add":
                def loop():
                    for _ in range(n_calls):
                        a + b
            elif op == "mul":
                def loop():
                    for _ in range(n_calls):
                        a * b
            elif op == "scalar":
                def loop():
                    for _ in range(n_calls):
                        a * 2.0
            else:
                def loop():
                    for _ in range(n_calls):
                        cp.maximum(a, 0)
            return ran(loop, cupy_sync)

        t = interleaved(label, frameworks(pg_case, torch_case, cupy_case), repeats)
        us = {fw: v / n_calls * 1e6 for fw, v in t.items()}
        add_row("dispatch", f"{label} (N={n_calls})", "us/op", us.get("pluggable"),
                us.get("torch"), us.get("cupy"),
                note="output allocated each call; wall time incl. final sync", rounds=t)


# --- 2. host <-> device bandwidth -----------------------------------------------

def bench_transfers(quick: bool) -> None:
    nbytes = 256 << 20
    repeats = 3 if quick else 5
    gb = nbytes / 1e9
    pageable = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)

    def rate(fn):
        t = median_time(fn, repeats, warmup=1)
        return gb / t

    # pluggable: raw buffers, pinned and pageable.
    def pg_buf(direction, pinned):
        dev = pg.get_device("GPU:0")
        buf = dev.allocate(nbytes)
        host = dev.allocate_host(nbytes) if pinned else np.empty(nbytes, np.uint8)
        host[:] = pageable
        if direction == "h2d":
            return rate(lambda: buf.copy_from_host(host))
        buf.copy_from_host(host)
        return rate(lambda: buf.copy_to_host(host))

    # pluggable: tensors (pg.constant / .numpy()), pageable numpy arrays.
    def pg_tensor(direction):
        if direction == "h2d":
            def run():
                with gpu_scope():
                    pg.constant(pageable)
                pg.synchronize()
            return rate(run)
        with gpu_scope():
            t = pg.constant(pageable)
        pg.synchronize()
        return rate(lambda: t.numpy())

    def torch_case(direction, pinned):
        if pinned:
            host = torch.from_numpy(pageable.copy()).pin_memory()
            dev_t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            if direction == "h2d":
                def run():
                    host.to("cuda", non_blocking=True)
                    torch_sync()
            else:
                def run():
                    host.copy_(dev_t, non_blocking=True)
                    torch_sync()
            return rate(run)
        if direction == "h2d":
            def run():
                torch.from_numpy(pageable).cuda()
                torch_sync()
            return rate(run)
        dev_t = torch.from_numpy(pageable).cuda()
        return rate(lambda: dev_t.cpu())

    def cupy_case(direction, pinned):
        if pinned:
            host = cupyx.empty_pinned((nbytes,), dtype=np.uint8)
            host[:] = pageable
            d = cp.empty(nbytes, dtype=cp.uint8)
            if direction == "h2d":
                def run():
                    d.set(host)
                    cupy_sync()
            else:
                def run():
                    d.get(out=host)
                    cupy_sync()
            return rate(run)
        if direction == "h2d":
            def run():
                cp.asarray(pageable)
                cupy_sync()
            return rate(run)
        d = cp.asarray(pageable)
        return rate(lambda: cp.asnumpy(d))

    for direction in ("h2d", "d2h"):
        arrow = "H2D" if direction == "h2d" else "D2H"
        for pinned in (True, False):
            kind = "pinned" if pinned else "pageable"
            add_row("transfer", f"{arrow} 256 MiB, {kind} (buffer copy)", "GB/s",
                    guarded(f"pg {arrow} {kind}", lambda: pg_buf(direction, pinned)) if pg else None,
                    guarded(f"torch {arrow} {kind}", lambda: torch_case(direction, pinned)) if torch else None,
                    guarded(f"cupy {arrow} {kind}", lambda: cupy_case(direction, pinned)) if cp else None)
        add_row("transfer", f"{arrow} 256 MiB, pageable (pg.constant / .numpy())", "GB/s",
                guarded(f"pg tensor {arrow}", lambda: pg_tensor(direction)) if pg else None,
                guarded(f"torch {arrow} pageable", lambda: torch_case(direction, False)) if torch else None,
                guarded(f"cupy {arrow} pageable", lambda: cupy_case(direction, False)) if cp else None,
                note="torch/cupy columns: from_numpy().cuda() / .cpu(), asarray / asnumpy")


# --- 3. AddV2 bandwidth ----------------------------------------------------------

def bench_add(quick: bool) -> None:
    n = 64 << 20
    iters = 20 if quick else 100
    repeats = 9 if quick else 5
    bytes_per_call = 3 * 4 * n
    host = np.random.default_rng(1).standard_normal(n, dtype=np.float32)

    def pg_case():
        with gpu_scope():
            a, b = pg.constant(host), pg.constant(host)

        def loop():
            with gpu_scope():
                for _ in range(iters):
                    pg.raw_ops.AddV2(x=a, y=b)
        return ran(loop, pg.synchronize)

    def torch_case():
        a = torch.from_numpy(host).cuda()
        b = torch.from_numpy(host).cuda()

        def loop():
            for _ in range(iters):
                a + b
        return ran(loop, torch_sync)

    def cupy_case():
        a, b = cp.asarray(host), cp.asarray(host)

        def loop():
            for _ in range(iters):
                a + b
        return ran(loop, cupy_sync)

    t = interleaved("add", frameworks(pg_case, torch_case, cupy_case), repeats)
    rate = {fw: bytes_per_call * iters / v / 1e9 for fw, v in t.items()}
    add_row("elementwise", "AddV2 64 Mi float32", "GB/s", rate.get("pluggable"),
            rate.get("torch"), rate.get("cupy"), note="3 * 4 * N bytes per call", rounds=t)


# --- 4. MatMul -----------------------------------------------------------------

def bench_matmul(quick: bool) -> None:
    n = 4096 if quick else 8192
    # A timed repeat of 20 products of 4096^3 lasts 3.5 ms or more (float16 at
    # 800 TFLOP/s), so the call and the synchronisation around it (10-30 us,
    # which differ between the frameworks) weigh under 1%; with 3 products
    # they were 5% of a float16 repeat, and the row measured them.
    iters = 20 if quick else 10
    # Rounds of one framework differ by up to 5% at 4096^3 in 16 bits (the
    # clocks under the power limit), so a row takes the median of 9.
    repeats = 9 if quick else 7
    flops = 2.0 * n ** 3 * iters
    rng = np.random.default_rng(2)
    a32 = rng.standard_normal((n, n), dtype=np.float32)
    b32 = rng.standard_normal((n, n), dtype=np.float32)

    import ml_dtypes
    cases = [("float32", np.float32, False), ("TF32", np.float32, True),
             ("float16", np.float16, False), ("bfloat16", ml_dtypes.bfloat16, False)]
    for label, npdt, tf32 in cases:
        a_h, b_h = a32.astype(npdt), b32.astype(npdt)

        def pg_case():
            with gpu_scope():
                a, b = pg.constant(a_h), pg.constant(b_h)

            def loop():
                pg.config.enable_tensor_float_32_execution(tf32)
                try:
                    with gpu_scope():
                        for _ in range(iters):
                            pg.raw_ops.MatMul(a=a, b=b)
                finally:
                    pg.config.enable_tensor_float_32_execution(False)
            return ran(loop, pg.synchronize)

        def torch_case():
            tdt = {"float32": torch.float32, "TF32": torch.float32,
                   "float16": torch.float16, "bfloat16": torch.bfloat16}[label]
            a = torch.from_numpy(a32).to("cuda", tdt)
            b = torch.from_numpy(b32).to("cuda", tdt)

            def loop():
                old = torch.backends.cuda.matmul.allow_tf32
                torch.backends.cuda.matmul.allow_tf32 = tf32
                try:
                    for _ in range(iters):
                        torch.matmul(a, b)
                finally:
                    torch.backends.cuda.matmul.allow_tf32 = old
            return ran(loop, torch_sync)

        def cupy_case():
            if label in ("TF32", "bfloat16"):
                return None  # CuPy: TF32 only via CUPY_TF32 at import; no bfloat16
            a, b = cp.asarray(a_h), cp.asarray(b_h)

            def loop():
                for _ in range(iters):
                    cp.matmul(a, b)
            return ran(loop, cupy_sync)

        t = interleaved(f"matmul {label}", frameworks(pg_case, torch_case, cupy_case), repeats)
        rate = {fw: flops / v / 1e12 for fw, v in t.items()}
        add_row("matmul", f"MatMul {n}^3 {label}", "TFLOP/s", rate.get("pluggable"),
                rate.get("torch"), rate.get("cupy"), note="2*N^3 per product; random data",
                rounds=t)


# --- 5. allocation ---------------------------------------------------------------

def bench_alloc(quick: bool) -> None:
    n_calls = 2000 if quick else 10000
    repeats = 5
    size = 1 << 20

    def pg_alloc():
        dev = pg.get_device("GPU:0")

        def loop():
            for _ in range(n_calls):
                buf = dev.allocate(size)
                del buf
        return ran(loop, pg.synchronize)

    def pg_fill():
        # Both on the host: the GPU kernel takes the value by value.
        with pg.device("CPU:0"):
            dims = pg.constant(np.array([size], np.int32))
            value = pg.constant(np.uint8(0))

        def loop():
            with gpu_scope():
                for _ in range(n_calls):
                    t = pg.raw_ops.Fill(dims=dims, value=value)
                    del t
        return ran(loop, pg.synchronize)

    def torch_case():
        def loop():
            for _ in range(n_calls):
                t = torch.empty(size, dtype=torch.uint8, device="cuda")
                del t
        return ran(loop, torch_sync)

    def cupy_case():
        def loop():
            for _ in range(n_calls):
                t = cp.empty(size, dtype=cp.uint8)
                del t
        return ran(loop, cupy_sync)

    def torch_full():
        def loop():
            for _ in range(n_calls):
                t = torch.full((size,), 0, dtype=torch.uint8, device="cuda")
                del t
        return ran(loop, torch_sync)

    def cupy_full():
        def loop():
            for _ in range(n_calls):
                t = cp.full(size, 0, dtype=cp.uint8)
                del t
        return ran(loop, cupy_sync)

    t = interleaved("allocate", frameworks(pg_alloc, torch_case, cupy_case), repeats)
    us = {fw: v / n_calls * 1e6 for fw, v in t.items()}
    add_row("allocation", "1 MiB allocate + free (dev.allocate)", "us/op",
            us.get("pluggable"), us.get("torch"), us.get("cupy"),
            note="torch.empty / cp.empty in the other columns", rounds=t)
    t = interleaved("fill", frameworks(pg_fill, torch_full, cupy_full), repeats)
    us = {fw: v / n_calls * 1e6 for fw, v in t.items()}
    add_row("allocation", "1 MiB tensor via Fill (allocates + fills)", "us/op",
            us.get("pluggable"), us.get("torch"), us.get("cupy"),
            note="value in host memory; torch.full / cp.full in the other columns", rounds=t)


# --- report ---------------------------------------------------------------------

def fmt(v) -> str:
    if v is None:
        return "n/a"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio(row) -> str:
    p, t = row["pluggable"], row["torch"]
    if p is None or t is None or t == 0:
        return "n/a"
    r = p / t
    better = "higher" if HIGHER_IS_BETTER[row["unit"]] else "lower"
    return f"{r:.2f}x ({better} is better)"


# --- 6. DLPack exchange ------------------------------------------------------------

def _pg_address(t) -> int:
    from pluggable._core import ffi, lib
    mem = ffi.new("SP_DeviceMemoryBase*")
    lib.pg_tensor_mem(t._h, mem)
    return int(ffi.cast("uintptr_t", mem.opaque))


def bench_dlpack(quick: bool) -> None:
    """A 1 MiB float32 GPU tensor handed to a peer library through DLPack and
    back (zero copy), us per round trip, for each framework with the same
    peer, so that a row compares the frameworks' own exports and imports:
    CuPy as the peer of pluggable and PyTorch, PyTorch as the peer of
    pluggable and CuPy (no PyTorch column: it cannot be its own peer; the
    note gives pluggable / CuPy), and JAX as the peer of all three where a
    CUDA build of jax is installed. The note says whether every exchange
    kept the memory address."""
    n = 200 if quick else 2000

    def per_op(loop, sync):
        def run():
            loop()
            sync()
        return median_time(run, 5, warmup=1) / n * 1e6

    def round_trip(x, to_peer, back, address, sync, same, name):
        same[name] = address(back(to_peer(x))) == address(x)

        def loop():
            for _ in range(n):
                back(to_peer(x))
        return per_op(loop, sync)

    size = 1 << 18

    def pg_tensor():
        with gpu_scope():
            return pg.constant(np.ones(size, np.float32))

    def row(peer, to_peer, label, with_torch=True, with_cupy=True):
        same = {}
        p = guarded(f"pg dlpack {peer}", lambda: round_trip(
            pg_tensor(), to_peer, pg.from_dlpack, _pg_address, pg.synchronize, same,
            "pluggable")) if pg else None
        t = guarded(f"torch dlpack {peer}", lambda: round_trip(
            torch.ones(size, device="cuda"), to_peer, torch.from_dlpack,
            lambda x: x.data_ptr(), torch_sync, same, "torch")) if with_torch else None
        c = guarded(f"cupy dlpack {peer}", lambda: round_trip(
            cp.ones(size, dtype=cp.float32), to_peer, cp.from_dlpack, lambda x: x.data.ptr,
            cupy_sync, same, "cupy")) if with_cupy else None
        zero = ", ".join(f"{k}: {'same address' if v else 'COPIED'}" for k, v in same.items())
        note = f"export + import, no copy expected ({zero})"
        if not with_torch and p and c:
            note += f"; pluggable / CuPy {p / c:.2f}x"
        add_row("dlpack", f"DLPack round trip via {label}, 1 MiB (N={n})", "us/op", p, t, c,
                note=note)

    if torch is None or cp is None:
        print("[dlpack] skipped: needs PyTorch and CuPy with CUDA as the peers", file=sys.stderr)
    else:
        row("cupy", cp.from_dlpack, "CuPy", with_cupy=False)
        row("torch", torch.from_dlpack, "PyTorch", with_torch=False)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU
    try:
        import jax
        jax.devices("gpu")
    except Exception as exc:
        print(f"[dlpack] the JAX row is skipped: no CUDA build of jax ({exc})", file=sys.stderr)
        return
    row("jax", jax.dlpack.from_dlpack, f"JAX {jax.__version__}", with_torch=torch is not None,
        with_cupy=cp is not None)


# --- 7. eager ops --------------------------------------------------------------------

def bench_ops(quick: bool) -> None:
    """The eager figures of a model's op mix on GPU:0, us per call (median
    of 5 runs of N calls, each run ending with a synchronisation): bias add,
    a reduction, softmax, cast, exp and transpose on a 4096x1024 float32
    tensor; a small MatMul (256^3); a 3x3 convolution (NHWC, channels_last in
    PyTorch, float32 without TF32 on both sides); the MLP 1024-4096-4096-1024
    (MatMul, bias, Relu) at batch 1, 64 and 8192; and reading one element
    back to a numpy array."""
    n = 200 if quick else 2000
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 1024)).astype(np.float32)
    bias = rng.standard_normal(1024).astype(np.float32)
    sm_a = rng.standard_normal((256, 256)).astype(np.float32)
    img = rng.standard_normal((32, 56, 56, 64)).astype(np.float32)
    filt = (rng.standard_normal((3, 3, 64, 64)) * 0.05).astype(np.float32)
    sizes = [1024, 4096, 4096, 1024]
    ws = [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
          for a, b in zip(sizes, sizes[1:])]
    bs = [(rng.standard_normal(b) * 0.1).astype(np.float32) for b in sizes[1:]]

    def pg_cases():
        with gpu_scope():
            gx, gb, ga = pg.constant(x), pg.constant(bias), pg.constant(sm_a)
            gimg, gf = pg.constant(img), pg.constant(filt)
            gw = [pg.constant(w) for w in ws]
            gbs = [pg.constant(b) for b in bs]
            one = pg.constant(np.ones(1, np.float32))
            batches = {b: pg.constant(rng.standard_normal((b, 1024)).astype(np.float32))
                       for b in (1, 64, 8192)}
        with pg.device("CPU:0"):
            axis = pg.constant(np.array([1], np.int32))
            perm = pg.constant(np.array([1, 0], np.int32))
        r = pg.raw_ops

        def mlp(h):
            for w, b in zip(gw, gbs):
                h = r.Relu(features=r.BiasAdd(value=r.MatMul(a=h, b=w), bias=b))
            return h
        return {
            "bias": lambda: r.BiasAdd(value=gx, bias=gb),
            "sum": lambda: r.Sum(input=gx, reduction_indices=axis),
            "softmax": lambda: r.Softmax(logits=gx),
            "cast": lambda: r.Cast(x=gx, DstT=pg.float16),
            "exp": lambda: r.Exp(x=gx),
            "transpose": lambda: r.Transpose(x=gx, perm=perm),
            "matmul": lambda: r.MatMul(a=ga, b=ga),
            "conv": lambda: r.Conv2D(input=gimg, filter=gf, strides=[1, 1, 1, 1],
                                     padding="SAME"),
            **{f"mlp{b}": (lambda h=h: mlp(h)) for b, h in batches.items()},
            "read": lambda: one.numpy(),
        }

    def torch_cases():
        dev = "cuda"
        # float32 in full precision on both sides: pluggable uses TF32 only
        # where pg.config enables it (off by default); cuDNN in PyTorch would
        # by default.
        torch.backends.cudnn.allow_tf32 = False
        tx, tb = torch.from_numpy(x).to(dev), torch.from_numpy(bias).to(dev)
        ta = torch.from_numpy(sm_a).to(dev)
        # NHWC data as PyTorch's channels_last NCHW tensors
        timg = torch.from_numpy(img).to(dev).permute(0, 3, 1, 2)
        tf = torch.from_numpy(filt).to(dev).permute(3, 2, 0, 1).contiguous(
            memory_format=torch.channels_last)
        tw = [torch.from_numpy(w).to(dev) for w in ws]
        tbs = [torch.from_numpy(b).to(dev) for b in bs]
        one = torch.ones(1, device=dev)
        batches = {b: torch.from_numpy(rng.standard_normal((b, 1024)).astype(np.float32)).to(dev)
                   for b in (1, 64, 8192)}

        def mlp(h):
            for w, b in zip(tw, tbs):
                h = torch.relu(h @ w + b)
            return h
        return {
            "bias": lambda: tx + tb,
            "sum": lambda: tx.sum(dim=1),
            "softmax": lambda: torch.softmax(tx, dim=-1),
            "cast": lambda: tx.to(torch.float16),
            "exp": lambda: torch.exp(tx),
            "transpose": lambda: tx.t().contiguous(),
            "matmul": lambda: ta @ ta,
            "conv": lambda: torch.nn.functional.conv2d(timg, tf, padding=1),
            **{f"mlp{b}": (lambda h=h: mlp(h)) for b, h in batches.items()},
            "read": lambda: one.cpu().numpy(),
        }

    names = {"bias": "BiasAdd 4096x1024 + 1024", "sum": "Sum 4096x1024 over axis 1",
             "softmax": "Softmax 4096x1024", "cast": "Cast 4096x1024 float32 -> float16",
             "exp": "Exp 4096x1024", "transpose": "Transpose 4096x1024",
             "matmul": "MatMul 256^3 float32", "conv": "Conv2D 3x3, 32x56x56x64 -> 64 (NHWC)",
             "mlp1": "MLP 1024-4096-4096-1024, batch 1",
             "mlp64": "MLP 1024-4096-4096-1024, batch 64",
             "mlp8192": "MLP 1024-4096-4096-1024, batch 8192",
             "read": "read back 1 element to numpy"}
    side_by_side("ops", names, pg_cases, torch_cases,
                 lambda key: max(n // 10, 10) if key in ("conv", "mlp8192") else n,
                 "{label} (N={calls})", "eager, output allocated each call")


def side_by_side(section: str, names: dict, pg_cases, torch_cases, calls_of, label: str,
                 note: str) -> None:
    """One row per case of `names` (key -> label): pluggable's and
    PyTorch's us per call, a run being `calls_of(key)` calls and the
    framework's synchronisation, 5 rounds in turns (``interleaved``); a side
    whose cases cannot be made, or a case that fails, is left out."""
    pgc = guarded(f"pg {section}", pg_cases) if pg else None
    tc = guarded(f"torch {section}", torch_cases) if torch else None
    for key, text in names.items():
        calls = calls_of(key)

        def looped(body, sync):
            def loop():
                for _ in range(calls):
                    body()
            return ran(loop, sync)
        t = interleaved(key, frameworks(
            (lambda: looped(pgc[key], pg.synchronize)) if pgc else None,
            (lambda: looped(tc[key], torch_sync)) if tc else None), 5)
        us = {fw: v / calls * 1e6 for fw, v in t.items()}
        add_row(section, label.format(label=text, calls=calls), "us/op", us.get("pluggable"),
                us.get("torch"), None, note=note, rounds=t)


# --- 8. user-level calls -----------------------------------------------------------

def bench_api(quick: bool) -> None:
    """The user-level functions a model calls (not raw ops) on a 64x64
    float32 tensor on GPU:0, us per call (median of 5 runs of N calls, each
    run ending with a synchronisation): small enough that the host's cost of
    the call is what is measured. PyTorch's rows are its equivalents."""
    n = 500 if quick else 5000
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)

    def pg_cases():
        with gpu_scope():
            gx, gb = pg.constant(x), pg.constant(b)
        return user_calls(pg, gx, gx, gb)

    def torch_cases():
        tx, tb = torch.from_numpy(x).cuda(), torch.from_numpy(b).cuda()
        return {
            "reduce_sum": lambda: tx.sum(1),
            "reduce_mean": lambda: tx.mean(),
            "cast": lambda: tx.to(torch.float16),
            "matmul": lambda: tx @ tx,
            "transpose": lambda: tx.t().contiguous(),
            "reshape": lambda: tx.reshape(32, 128),
            "zeros": lambda: torch.zeros(64, 64, device="cuda"),
            "bias_add": lambda: tx + tb,
            "softmax": lambda: torch.softmax(tx, -1),
        }

    names = {"reduce_sum": "pg.reduce_sum(x, 1)", "reduce_mean": "pg.reduce_mean(x)",
             "cast": "pg.cast(x, pg.float16)", "matmul": "x @ x",
             "transpose": "pg.transpose(x) (torch: x.t().contiguous())",
             "reshape": "pg.reshape(x, [32, 128]) (torch: a view, no op)",
             "zeros": "pg.zeros([64, 64])",
             "bias_add": "pg.nn.bias_add(x, b)", "softmax": "pg.nn.softmax(x)"}
    side_by_side("api", names, pg_cases, torch_cases, lambda key: n,
                 "{label}, 64x64 float32 (N={calls})",
                 "eager user-level call, output allocated each call")


def plot(path: str, env: dict, command: str) -> None:
    """A PNG of every row as pluggable's speed relative to PyTorch (PyTorch's
    time over pluggable's, or pluggable's rate over PyTorch's: above 1 is
    faster), titled with the date, the GPU, the versions and the command."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"--plot: matplotlib is not installed; no plot written to {path}",
              file=sys.stderr)
        return
    rows = [r for r in ROWS if r["pluggable"] and r["torch"]]
    speed = [(r["pluggable"] / r["torch"]) if HIGHER_IS_BETTER[r["unit"]]
             else (r["torch"] / r["pluggable"]) for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 1.8))
    ypos = range(len(rows))[::-1]
    ax.barh(list(ypos), speed, color=["#3a7" if v >= 1 else "#c55" for v in speed])
    ax.set_yticks(list(ypos), [f"{r['name']} [{r['unit']}]" for r in rows], fontsize=7)
    ax.axvline(1.0, color="k", linewidth=0.8)
    for y, v in zip(ypos, speed):
        ax.text(v, y, f" {v:.2f}", va="center", fontsize=7)
    ax.set_xlabel("pluggable speed relative to PyTorch (above 1: faster)")
    ax.set_title(f"{time.strftime('%Y-%m-%d')}, {env.get('gpu', '?')}\n"
                 f"pluggable {env.get('pluggable')}, PyTorch {env.get('torch', 'n/a')}, "
                 f"CuPy {env.get('cupy', 'n/a')}, Python {env.get('python')}, numpy "
                 f"{env.get('numpy')}\n{command}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}")


def print_table() -> None:
    print("| benchmark | unit | pluggable | PyTorch | CuPy | pluggable / PyTorch "
          "| time ratio by round |")
    print("|---|---|---|---|---|---|---|")
    for r in ROWS:
        print(f"| {r['name']} | {r['unit']} | {fmt(r['pluggable'])} | {fmt(r['torch'])} | "
              f"{fmt(r['cupy'])} | {ratio(r)} | {round_spread(r)} |")


def round_spread(row) -> str:
    """pluggable's time over PyTorch's in the row's rounds: lowest, median,
    highest (rows timed in turns only)."""
    pairs = row.get("round_time_ratios")
    if not pairs:
        return ""
    return f"{pairs[0]:.3f} / {statistics.median(pairs):.3f} / {pairs[-1]:.3f}"


def environment() -> dict:
    env = {"python": platform.python_version(), "numpy": np.__version__}
    if pg is not None:
        env["pluggable"] = getattr(pg, "__version__", "?")
        try:
            d = pg.get_device("GPU:0")
            env["gpu"] = d.hardware_name
            env["pci_bus_id"] = d.pci_bus_id
            env["launch_thread"] = "off" if os.environ.get(
                "PLUGGABLE_CUDA_LAUNCH_THREAD") == "0" else "on"
        except Exception as exc:
            env["gpu"] = f"unavailable: {exc}"
    else:
        env["pluggable"] = f"import failed: {PG_IMPORT_ERROR}"
    if torch is not None:
        env["torch"] = torch.__version__
    if cp is not None:
        env["cupy"] = cp.__version__
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations, smaller MatMul")
    ap.add_argument("--json", metavar="PATH", help="write the rows as JSON to PATH")
    ap.add_argument("--only", metavar="SECTIONS",
                    help="comma-separated sections to run: dispatch, transfers, add, matmul, "
                         "alloc, dlpack, ops, api (default: all)")
    ap.add_argument("--plot", metavar="PNG",
                    help="draw every row as a ratio to PyTorch into PNG (needs matplotlib)")
    args = ap.parse_args(argv)
    if pg is not None and not pg.list_physical_devices("GPU"):
        print("no GPU device in pluggable: the CUDA plugin did not load or no GPU present",
              file=sys.stderr)
    sections = (bench_dispatch, bench_transfers, bench_add, bench_matmul, bench_alloc,
                bench_dlpack, bench_ops, bench_api)
    if args.only:
        wanted = {w.strip() for w in args.only.split(",")}
        unknown = wanted - {f.__name__[len("bench_"):] for f in sections}
        if unknown:
            ap.error(f"unknown sections: {', '.join(sorted(unknown))}")
        sections = tuple(f for f in sections if f.__name__[len("bench_"):] in wanted)
    for section in sections:
        try:
            section(args.quick)
        except Exception:
            print(f"section {section.__name__} failed:", file=sys.stderr)
            traceback.print_exc()
    env = environment()
    print()
    print("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    print()
    print_table()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "quick": args.quick, "rows": ROWS}, f, indent=2)
    if args.plot:
        plot(args.plot, env, "python3 benchmarks/bench_gpu.py " + " ".join(
            sys.argv[1:] if argv is None else argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
