"""A GPT-style language model's training step in pluggable beside PyTorch
(eager and torch.compile) in one process on one GPU: token embedding by
gather, learned positions, pre-LN blocks (causal multi-head attention, GELU
MLP 4x), a final layer norm, the output projection tied to the embedding,
sparse softmax cross-entropy and Adam.

The pluggable model is written with the public API (pg.Variable,
pg.GradientTape, pg.optimizers.Adam) in two forms:

  pg composite   attention as matmul + mask + softmax + matmul, layer norm
                 from moments and arithmetic
  pg fused       pg.nn.scaled_dot_product_attention, pg.nn.layer_norm and
                 pg.nn.bias_gelu (the MLP's bias + GELU in one pass)
  pg fused traced  the fused step inside pg.function (skipped with the
                 reason when tracing fails)

PyTorch runs the same model from the same initial weights (F.layer_norm,
F.scaled_dot_product_attention(is_causal=True), torch.optim.Adam; both Adams
with epsilon 1e-8, which Keras's form scales by sqrt(1 - beta_2^t); the
pluggable Adam's default fused=None runs its multi-tensor step, one launch
for all the weights, on a device with that kernel, as torch.optim.Adam's
foreach step does). Modes:
fp32 (TF32 off everywhere), tf32 (TF32 matmuls), bf16 (mixed precision with
float32 master weights in both frameworks: pluggable under the global policy
pg.mixed_precision "mixed_bfloat16", whose float32 variables are read as
bfloat16 through a Cast on the device, with the logits cast to float32 for
the cross-entropy as TensorFlow's mixed precision guide advises; PyTorch
under torch.autocast(bfloat16) with float32 parameters; both Adams update
float32 weights and float32 moments). The losses of the first steps must
agree with PyTorch eager within the mode's tolerance (the run says "loss
MISMATCH" otherwise). Reported:
steps/s (median of --repeats runs of --steps steps, each run ending with a
synchronisation) and model FLOP utilisation, with 6 * parameters + 12 *
layers * d_model * seq FLOPs per token (no causal discount) against the
H100/H200 dense peaks (fp32 67, tf32 495, bf16 989 TFLOP/s).

usage: python3 benchmarks/transformer_gpu.py [--large] [--modes fp32,tf32,bf16]
       [--steps N] [--repeats R] [--only pg,torch] [--variants composite,fused,traced]
       [--json PATH] [--device GPU:0] [--tiny] [--kernels STEPS]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

PEAK = {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12}
DEVICE = "GPU:0"  # --device
LOSS_TOL = {"fp32": 2e-4, "tf32": 2e-2, "bf16": 6e-2}


def config(large: bool, tiny: bool = False) -> dict:
    if tiny:  # a smoke test of the script itself, on any device
        return dict(d=32, heads=4, seq=16, layers=2, batch=2, vocab=64)
    if large:
        return dict(d=1024, heads=16, seq=1024, layers=8, batch=16, vocab=8192)
    return dict(d=512, heads=8, seq=256, layers=4, batch=16, vocab=8192)


def init_weights(c: dict, seed: int = 0) -> dict:
    """The initial weights (float32 numpy), shared by every framework."""
    rng = np.random.default_rng(seed)
    d, v = c["d"], c["vocab"]
    n = lambda *s: (rng.standard_normal(s) * 0.02).astype(np.float32)  # noqa: E731
    w = {"wte": n(v, d), "wpe": n(c["seq"], d), "lnf_g": np.ones(d, np.float32),
         "lnf_b": np.zeros(d, np.float32)}
    for i in range(c["layers"]):
        w.update({f"{i}.ln1_g": np.ones(d, np.float32), f"{i}.ln1_b": np.zeros(d, np.float32),
                  f"{i}.wqkv": n(d, 3 * d), f"{i}.bqkv": np.zeros(3 * d, np.float32),
                  f"{i}.wo": n(d, d) / math.sqrt(2 * c["layers"]),
                  f"{i}.bo": np.zeros(d, np.float32),
                  f"{i}.ln2_g": np.ones(d, np.float32), f"{i}.ln2_b": np.zeros(d, np.float32),
                  f"{i}.w1": n(d, 4 * d), f"{i}.b1": np.zeros(4 * d, np.float32),
                  f"{i}.w2": n(4 * d, d) / math.sqrt(2 * c["layers"]),
                  f"{i}.b2": np.zeros(d, np.float32)})
    return w


def batches(c: dict, count: int, seed: int = 1) -> list:
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, c["vocab"], (c["batch"], c["seq"])).astype(np.int32),
             rng.integers(0, c["vocab"], (c["batch"], c["seq"])).astype(np.int32))
            for _ in range(count)]


def flops_per_step(c: dict) -> float:
    d, L = c["d"], c["layers"]
    params = L * 12 * d * d + c["vocab"] * d  # blocks + tied projection (biases, norms aside)
    tokens = c["batch"] * c["seq"]
    return tokens * (6 * params + 12 * L * d * c["seq"])


# ------------------------------------------------------------ pluggable

def pg_model(c: dict, weights: dict, mode: str, fused: bool, traced: bool):
    """(step(ids, labels) -> loss tensor, sync()) for pluggable."""
    import pluggable as pg
    pg.config.experimental.enable_tensor_float_32_execution(mode == "tf32")
    policy = "mixed_bfloat16" if mode == "bf16" else "float32"
    dt = pg.as_dtype(pg.mixed_precision.Policy(policy).compute_dtype)  # of the activations
    B, S, d, H = c["batch"], c["seq"], c["d"], c["heads"]
    Dh = d // H
    # the variables made under the policy store float32 and read as `dt`
    with pg.device(DEVICE), pg.mixed_precision.policy_scope(policy):
        var = {k: pg.Variable(w, name=k.replace(".", "_")) for k, w in weights.items()}
        opt = pg.optimizers.Adam(learning_rate=1e-3, epsilon=1e-8)
        scale = pg.constant(1 / math.sqrt(Dh), dt)
        bias = pg.cast(pg.constant(np.where(np.tril(np.ones((S, S), bool)), 0.0, -1e9)
                                   .astype(np.float32)), dt)

    def norm(x, g, b):
        if fused:
            return pg.nn.layer_norm(x, g, b, epsilon=1e-5)
        mean, var_ = pg.nn.moments(x, [1], keepdims=True)
        inv = pg.math.rsqrt(var_ + pg.constant(1e-5, dt))
        return (x - mean) * inv * g + b

    def attention(q, k, v):
        if fused:
            return pg.nn.scaled_dot_product_attention(q, k, v, causal=True)
        s = pg.matmul(q, k, transpose_b=True) * scale + bias
        return pg.matmul(pg.nn.softmax(s), v)

    def bias_gelu(x, b):
        if fused:
            return pg.nn.bias_gelu(x, b)
        return pg.nn.gelu(x + b)

    def loss_fn(ids, labels):
        x = pg.reshape(pg.gather(var["wte"], ids) + var["wpe"], [B * S, d])
        for i in range(c["layers"]):
            h = norm(x, var[f"{i}.ln1_g"], var[f"{i}.ln1_b"])
            qkv = pg.matmul(h, var[f"{i}.wqkv"]) + var[f"{i}.bqkv"]
            qkv = pg.transpose(pg.reshape(qkv, [B, S, 3, H, Dh]), [2, 0, 3, 1, 4])
            q, k, v = pg.unstack(qkv, axis=0)
            o = pg.reshape(pg.transpose(attention(q, k, v), [0, 2, 1, 3]), [B * S, d])
            x = x + pg.matmul(o, var[f"{i}.wo"]) + var[f"{i}.bo"]
            h = norm(x, var[f"{i}.ln2_g"], var[f"{i}.ln2_b"])
            f = bias_gelu(pg.matmul(h, var[f"{i}.w1"]), var[f"{i}.b1"])
            x = x + pg.matmul(f, var[f"{i}.w2"]) + var[f"{i}.b2"]
        h = norm(x, var["lnf_g"], var["lnf_b"])
        logits = pg.matmul(h, var["wte"], transpose_b=True)
        if logits.dtype != pg.float32:  # the loss in float32, as torch.autocast computes it
            logits = pg.cast(logits, pg.float32)
        xent = pg.nn.sparse_softmax_cross_entropy_with_logits(pg.reshape(labels, [B * S]), logits)
        return pg.math.reduce_mean(xent)

    names = list(weights)

    def step(ids, labels):
        with pg.GradientTape() as tape:
            loss = loss_fn(ids, labels)
        grads = tape.gradient(loss, [var[n] for n in names])
        opt.apply_gradients(zip(grads, [var[n] for n in names]))
        return loss

    run = pg.function(step) if traced else step

    def call(ids, labels):
        with pg.device(DEVICE):
            return run(pg.constant(ids), pg.constant(labels))

    def sync(loss):
        return float(np.asarray(loss.numpy(), np.float32))
    return call, sync


# ------------------------------------------------------------ PyTorch

def torch_model(c: dict, weights: dict, mode: str, compiled: bool):
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    dev = torch.device("cuda")
    B, S, d, H = c["batch"], c["seq"], c["d"], c["heads"]
    Dh = d // H
    # float32 parameters and Adam state; bf16 is torch.autocast's compute dtype
    p = {k: torch.tensor(w, device=dev, dtype=torch.float32, requires_grad=True)
         for k, w in weights.items()}
    opt = torch.optim.Adam(list(p.values()), lr=1e-3)

    def bias_gelu(x, b):
        if fused:
            return pg.nn.bias_gelu(x, b)
        return pg.nn.gelu(x + b)

    def loss_fn(ids, labels):
        x = (p["wte"][ids] + p["wpe"]).reshape(B * S, d)
        for i in range(c["layers"]):
            h = F.layer_norm(x, (d,), p[f"{i}.ln1_g"], p[f"{i}.ln1_b"], 1e-5)
            qkv = (h @ p[f"{i}.wqkv"] + p[f"{i}.bqkv"]).reshape(B, S, 3, H, Dh)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o = o.transpose(1, 2).reshape(B * S, d)
            x = x + o @ p[f"{i}.wo"] + p[f"{i}.bo"]
            h = F.layer_norm(x, (d,), p[f"{i}.ln2_g"], p[f"{i}.ln2_b"], 1e-5)
            x = x + F.gelu(h @ p[f"{i}.w1"] + p[f"{i}.b1"]) @ p[f"{i}.w2"] + p[f"{i}.b2"]
        h = F.layer_norm(x, (d,), p["lnf_g"], p["lnf_b"], 1e-5)
        return F.cross_entropy(h @ p["wte"].t(), labels.reshape(B * S).long())

    fwd = torch.compile(loss_fn) if compiled else loss_fn

    def step(ids, labels):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
            loss = fwd(torch.from_numpy(ids).to(dev).long(),
                       torch.from_numpy(labels).to(dev).long())
        loss.backward()
        opt.step()
        return loss

    def sync(loss):
        torch.cuda.synchronize()
        return float(loss.detach().float().item())
    return step, sync


# ------------------------------------------------------------ driver

def profile_steps(name, make, data, steps: int) -> None:
    """The kernels of `steps` steps, per step (gpu_peers.kernel_table)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpu_peers import kernel_table
    step, sync = make()
    for i in range(2):
        sync(step(*data[i % len(data)]))
    it = iter(range(10 ** 9))
    kernel_table(name, lambda: sync(step(*data[next(it) % len(data)])), steps)



def measure(name, make, data, args, check_steps, ref_losses, mode, c):
    try:
        step, sync = make()
        losses = [sync(step(*data[i])) for i in range(check_steps)]
    except Exception as exc:  # a variant that cannot run says why and the others go on
        print(f"  {name:24s} FAILED: {type(exc).__name__}: {str(exc)[:300]}")
        return None
    note = ""
    if ref_losses is not None:
        rel = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(losses, ref_losses))
        note = f"loss {'ok' if rel <= LOSS_TOL[mode] else 'MISMATCH'} (max rel {rel:.1e})"
    runs = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for i in range(args.steps):
            loss = step(*data[(check_steps + i) % len(data)])
        sync(loss)
        runs.append((time.perf_counter() - t0) / args.steps)
    t = statistics.median(runs)
    mfu = flops_per_step(c) / t / PEAK[mode]
    print(f"  {name:24s} {1 / t:8.2f} steps/s  {t * 1e3:8.2f} ms/step  MFU {mfu * 100:5.1f}%  "
          f"losses {', '.join(f'{x:.4f}' for x in losses)}  {note}")
    return {"name": name, "mode": mode, "steps_per_s": 1 / t, "ms_per_step": t * 1e3,
            "mfu": mfu, "losses": losses, "check": note, "runs_ms": [r * 1e3 for r in runs]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--large", action="store_true", help="d_model 1024, 16 heads, seq 1024, 8 layers")
    ap.add_argument("--modes", default="fp32,tf32,bf16")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--check-steps", type=int, default=3)
    ap.add_argument("--only", default="pg,torch", help="frameworks to run: pg, torch")
    ap.add_argument("--variants", default="composite,fused,traced",
                    help="pluggable forms: composite, fused, traced")
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", default="GPU:0", help="pluggable's device (PyTorch: cuda)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model, to check the script")
    ap.add_argument("--kernels", type=int, default=0, metavar="STEPS",
                    help="also list the kernels of STEPS steps of torch eager and pg fused")
    args = ap.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    c = config(args.large, args.tiny)
    weights = init_weights(c)
    data = batches(c, args.check_steps + args.steps)
    frameworks = set(args.only.split(","))
    variants = set(args.variants.split(","))
    print(f"model {c}, {flops_per_step(c) / 1e12:.3f} TFLOP per step")
    results = []
    for mode in args.modes.split(","):
        print(f"[{mode}]")
        ref = None
        if "torch" in frameworks:
            r = measure("torch eager", lambda: torch_model(c, weights, mode, False), data, args,
                        args.check_steps, None, mode, c)
            if r:
                ref = r["losses"]
                results.append(r)
            r = measure("torch.compile", lambda: torch_model(c, weights, mode, True), data,
                        args, args.check_steps, ref, mode, c)
            results += [r] if r else []
        if "pg" in frameworks:
            for v, fused, traced in (("composite", False, False), ("fused", True, False),
                                     ("traced", True, True)):
                if v not in variants:
                    continue
                name = {"composite": "pg composite", "fused": "pg fused",
                        "traced": "pg fused traced"}[v]
                r = measure(name, lambda: pg_model(c, weights, mode, fused, traced), data, args,
                            args.check_steps, ref, mode, c)
                results += [r] if r else []
        if args.kernels:
            if "torch" in frameworks:
                profile_steps("torch eager", lambda: torch_model(c, weights, mode, False), data,
                             args.kernels)
            if "pg" in frameworks:
                profile_steps("pg fused", lambda: pg_model(c, weights, mode, True, False), data,
                             args.kernels)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": c, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
