"""Every op of an eager training step takes the fast dispatch path once the
step has run: the GPT-style model of benchmarks/transformer_gpu.py (tiny
sizes), in both its forms (attention and layer norm composed of ops, and
through pg.nn.scaled_dot_product_attention / pg.nn.layer_norm) and both
precisions (fp32; bf16: mixed precision, float32 weights read as bfloat16
through a Cast), forward,
gradients (GradientTape) and Adam updates. A call that reaches the general
path (``dispatch._execute``: converting inputs, building the plan key,
copies) after the first steps is counted and fails the test, with the op and
where it was called from. The step must still train (finite losses, a
lower loss on a batch seen again)."""
from __future__ import annotations

import collections
import pathlib
import sys
import traceback

import numpy as np
import pytest

import pluggable as pg
from pluggable.runtime import dispatch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
import transformer_gpu  # noqa: E402


def _device(name: str) -> str:
    if not any(d.device_type == name.split(":")[0] for d in pg.config.list_logical_devices()):
        pytest.skip(f"no {name} device is present (the GPU plugin needs a CUDA GPU)")
    return name


@pytest.mark.parametrize("device", ["MY_DEVICE:0", "GPU:0"])
@pytest.mark.parametrize("fused", [False, True], ids=["composite", "fused"])
@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_no_op_of_an_eager_step_takes_the_general_path(device, fused, mode, monkeypatch):
    transformer_gpu.DEVICE = _device(device)
    c = transformer_gpu.config(False, tiny=True)
    weights = transformer_gpu.init_weights(c)
    data = transformer_gpu.batches(c, 4)
    step, sync = transformer_gpu.pg_model(c, weights, mode, fused=fused, traced=False)
    losses = [sync(step(ids, labels)) for ids, labels in data[:2]]
    general: collections.Counter = collections.Counter()
    where: dict = {}
    run = dispatch._execute

    def counting(op, inputs, given):
        general[op.name] += 1
        where.setdefault(op.name, "".join(traceback.format_stack(limit=8)[:-1]))
        return run(op, inputs, given)
    monkeypatch.setattr(dispatch, "_execute", counting)
    losses += [sync(step(ids, labels)) for ids, labels in data[2:]]
    monkeypatch.setattr(dispatch, "_execute", run)
    assert not general, (f"ops of the step on the general path: {dict(general)}\n" +
                         "\n".join(f"{op}:\n{w}" for op, w in where.items()))
    # the step trains: the same data again gives a lower loss
    assert all(np.isfinite(losses)), losses
    again = sync(step(*data[0]))
    assert again < losses[0], (losses, again)
