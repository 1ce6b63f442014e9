"""examples/train_digits.py: a shortened training of the digits CNN on
MY_DEVICE (seconds) learns (the loss falls, the test accuracy is far above
chance), runs its ops and the Adam step as MY_DEVICE kernels, prints a
progress bar and writes a valid PNG of the loss curve."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import pathlib
import struct
import sys
import zlib

import numpy as np
import pytest

import pluggable as pg

pytest.importorskip("sklearn", reason="scikit-learn (the test extra) ships the digits data set")

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_digits.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def read_png(path) -> np.ndarray:
    """Decodes the 8-bit RGB, filter-0 PNG the example writes, checking the
    signature, every chunk's CRC and the chunk order."""
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, kind
        chunks.append((kind, body))
        pos += 12 + n
    assert [k for k, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, color, interlace) == (8, 2, 0)
    raw = np.frombuffer(zlib.decompress(chunks[1][1]), np.uint8).reshape(h, 1 + 3 * w)
    assert not raw[:, 0].any()          # filter type 0 on every row
    return raw[:, 1:].reshape(h, w, 3)


def test_short_training_on_my_device_learns(example, rng, tmp_path):
    seed = int(rng.integers(1 << 30))
    out = io.StringIO()
    png = tmp_path / "loss.png"
    with contextlib.ExitStack() as stack:
        stack.enter_context(pg.testing.expect_kernel("ResourceApplyAdam", "MY_DEVICE",
                                                     min_calls=8 * 30))   # 8 variables, 30 steps
        for op in ("Conv2D", "BiasAdd", "MaxPool", "SparseSoftmaxCrossEntropyWithLogits",
                   "Conv2DBackpropFilter", "Conv2DBackpropInput", "MaxPoolGrad",
                   "BiasAddGrad", "ReluGrad", "ArgMax"):
            stack.enter_context(pg.testing.expect_kernel(op, "MY_DEVICE"))
        result = example.train("MY_DEVICE:0", epochs=2, batch_size=32, learning_rate=1e-2,
                               seed=seed, train_limit=480, progress=out, png=str(png))
    losses = np.asarray(result.step_losses)
    assert len(losses) == 30 and np.isfinite(losses).all()
    assert losses[-5:].mean() < 0.75 * losses[:3].mean(), (seed, losses)
    assert result.epoch_losses[1] < result.epoch_losses[0], seed
    # Chance is 0.1. After these 30 steps the accuracy over 660 random seeds
    # was at least 0.33, and below 0.5 for about 2% of them: the bound shows
    # learning without failing on an unlucky seed.
    assert result.test_accuracy > 0.25, (seed, result.test_accuracy)
    lines = out.getvalue().splitlines()
    assert [ln.split("[")[0].strip() for ln in lines] == ["epoch 1/2", "epoch 2/2"]
    assert "15/15" in lines[-1] and "test accuracy" in lines[-1]
    img = read_png(png)
    assert img.shape == (360, 640, 3)
    assert (img == (180, 30, 30)).all(axis=-1).sum() > 50          # the epoch-mean curve
    assert (img == (120, 170, 230)).all(axis=-1).sum() > 50        # the per-step curve


def test_command_line_device_option(example, capsys):
    with pytest.raises(SystemExit) as info:
        example.main(["--device", "NO_SUCH_DEVICE", "--quick"])
    assert info.value.code == 2
    assert "NO_SUCH_DEVICE" in capsys.readouterr().err
    assert example._device_name("cpu") == "CPU:0" and example._device_name("GPU:1") == "GPU:1"
    assert example.default_device() != "CPU:0"          # MY_DEVICE is always there


def test_short_training_with_traced_steps_matches_eager(example, rng):
    """``--function``: each step is a graph (one trace per batch shape), the
    device kernels run in it, the loss falls, and the losses are those of
    the eager steps (the same work, traced)."""
    seed = int(rng.integers(1 << 30))
    kw = dict(epochs=2, batch_size=32, learning_rate=1e-2, seed=seed, train_limit=320)
    with contextlib.ExitStack() as stack:
        stack.enter_context(pg.testing.expect_kernel("ResourceApplyAdam", "MY_DEVICE",
                                                     min_calls=8 * 20))
        for op in ("Conv2D", "Conv2DBackpropFilter", "MaxPoolGrad", "BiasAddGrad"):
            stack.enter_context(pg.testing.expect_kernel(op, "MY_DEVICE"))
        traced = example.train("MY_DEVICE:0", function=True, **kw)
    eager = example.train("MY_DEVICE:0", **kw)
    assert traced.traces == 1                     # 320 = 10 full batches: one shape
    losses = np.asarray(traced.step_losses)
    assert len(losses) == 20 and np.isfinite(losses).all()
    assert losses[-5:].mean() < 0.8 * losses[:3].mean(), (seed, losses)
    np.testing.assert_allclose(losses, eager.step_losses, rtol=1e-4, atol=1e-5)


def test_command_line_function_option(example, capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(example, "train", lambda *a, **k: calls.append(k) or example.Result(
        "MY_DEVICE:0", 1, 0.5, [1.0], [1.0], 0.1, 1))
    assert example.main(["--device", "MY_DEVICE", "--quick", "--function", "--png", ""]) == 0
    assert calls[0]["function"] is True
    assert "1 traces of the step" in capsys.readouterr().out
