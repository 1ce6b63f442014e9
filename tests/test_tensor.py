"""Tensors: construction, dtypes, 0-d and empty tensors, repr, operators,
copies between devices, numpy and DLPack interop."""
import os

import numpy as np
import pytest

import pluggable as pg

DTYPES = [np.bool_, np.int32, np.int64, np.float16, np.float32, np.float64]


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (2, 3, 4)])
def test_round_trip(device, dtype, shape):
    rng = np.random.default_rng()
    a = (rng.standard_normal(shape) * 10).astype(dtype)
    with pg.device(device):
        t = pg.constant(a)
    assert t.shape == shape and t.dtype == pg.as_dtype(dtype)
    assert t.device.endswith(device)
    out = t.numpy()
    assert out.dtype == a.dtype and out.shape == shape
    np.testing.assert_array_equal(out, a)


def test_python_values_follow_tensorflow_defaults():
    assert pg.constant(1.5).dtype == pg.float32
    assert pg.constant(3).dtype == pg.int32
    assert pg.constant(2**40).dtype == pg.int64
    assert pg.constant(True).dtype == pg.bool
    assert pg.constant([[1, 2], [3, 4]]).shape == (2, 2)
    assert pg.constant(np.float64(1.0)).dtype == pg.float64
    assert pg.constant([1, 2], dtype="float16").dtype == pg.float16
    assert pg.constant(7, shape=(2, 3)).numpy().tolist() == [[7] * 3] * 2


def test_bfloat16_round_trip():
    import ml_dtypes
    a = np.array([1.5, -2.25, 3.0], ml_dtypes.bfloat16)
    with pg.device("MY_DEVICE:0"):
        t = pg.constant(a)
    assert t.dtype == pg.bfloat16
    np.testing.assert_array_equal(t.numpy().astype(np.float32), a.astype(np.float32))


def test_unsupported_values_raise_type_error():
    with pytest.raises(TypeError, match="supported dtype"):
        pg.constant(np.array(["2020-01-01"], "datetime64[D]"))
    with pytest.raises(TypeError, match="complex values"):
        pg.constant(np.array([1 + 2j]), dtype=pg.float32)
    with pytest.raises(TypeError):
        pg.constant(["a", "b"], dtype=pg.int32)
    with pytest.raises(TypeError):
        pg.constant([1, 2], dtype=pg.string)
    with pytest.raises(TypeError, match="not a supported dtype"):
        pg.constant([1.0], dtype="complex256")
    with pytest.raises(TypeError, match="fraction"):
        pg.constant([1.5], dtype=pg.int32)
    with pytest.raises(pg.errors.InvalidArgumentError, match="cannot fill shape"):
        pg.constant([1, 2, 3], shape=(2, 2))


def test_cpu_tensors_share_memory_with_numpy():
    a = np.arange(6, dtype=np.float32)
    t = pg.constant(a)
    view = t.numpy()
    assert np.shares_memory(view, t.numpy())
    assert not view.flags.writeable  # tensors are immutable


def test_repr_and_item():
    with pg.device("MY_DEVICE:0"):
        t = pg.constant([1.0, 2.0])
    assert repr(t) == "<tf.Tensor: shape=(2,), dtype=float32, numpy=array([1., 2.], dtype=float32)>"
    assert pg.constant(4.0).item() == 4.0
    assert float(pg.constant(2.5)) == 2.5 and int(pg.constant(3)) == 3
    with pytest.raises(pg.errors.InvalidArgumentError, match="one element"):
        t.item()


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_python_operators(device):
    rng = np.random.default_rng()
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32) + 3
    with pg.device(device):
        x, y = pg.constant(a), pg.constant(b)
        np.testing.assert_allclose((x + y).numpy(), a + b, rtol=1e-6)
        np.testing.assert_allclose((x - 1.0).numpy(), a - 1, rtol=1e-6)
        np.testing.assert_allclose((2.0 * x).numpy(), 2 * a, rtol=1e-6)
        np.testing.assert_allclose((x / y).numpy(), a / b, rtol=1e-6)
        np.testing.assert_allclose((1.0 / y).numpy(), 1 / b, rtol=1e-6)
        np.testing.assert_allclose((-x).numpy(), -a)
        np.testing.assert_allclose(abs(x).numpy(), np.abs(a))
        np.testing.assert_allclose((x @ pg.transpose(x)).numpy(), a @ a.T, rtol=1e-5,
                                   atol=1e-5)
        i = pg.constant(np.array([7, -7], np.int32))
        np.testing.assert_allclose((i / 2).numpy(), np.array([3.5, -3.5]))


def test_copies_between_devices_are_exact():
    rng = np.random.default_rng()
    a = rng.standard_normal((33, 17)).astype(np.float64)
    t = pg.constant(a).to("MY_DEVICE:0")
    assert t.device.endswith("MY_DEVICE:0")
    assert t.to("MY_DEVICE:0") is t
    np.testing.assert_array_equal(t.to("CPU:0").numpy(), a)
    with pg.device("MY_DEVICE:0"):
        assert pg.identity(t).device.endswith("MY_DEVICE:0")


def test_large_copy_round_trip():
    a = np.random.default_rng().integers(0, 255, size=(8 << 20), dtype=np.uint8).view(np.int32)
    with pg.device("MY_DEVICE:0"):
        t = pg.constant(a)
    np.testing.assert_array_equal(t.numpy(), a)


def test_dlpack_interop():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = pg.from_dlpack(a)
    assert np.shares_memory(t.numpy(), a)
    back = np.from_dlpack(t)
    np.testing.assert_array_equal(back, a)
    with pg.device("MY_DEVICE:0"):
        d = pg.constant(a)
    np.testing.assert_array_equal(np.from_dlpack(d), a)
    np.testing.assert_array_equal(np.asarray(d), a)


def test_cublas_locator_finds_nvidia_wheels(tmp_path, monkeypatch):
    from pluggable.plugins import cuda_env as _cuda_env
    lib = tmp_path / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    for name in ("libcublas.so.13", "libcublasLt.so.13"):
        (lib / name).write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cuda_env.locate_cublas() == str(lib / "libcublas.so.13")


def test_cudnn_locator_finds_the_wheel_and_not_its_sub_libraries(tmp_path, monkeypatch):
    """nvidia-cudnn-cu13 puts libcudnn.so.9 next to its sub-libraries
    (libcudnn_cnn.so.9, ...), which must not be taken for it."""
    from pluggable.plugins import cuda_env as _cuda_env
    lib = tmp_path / "nvidia" / "cudnn" / "lib"
    lib.mkdir(parents=True)
    for name in ("libcudnn_cnn.so.9", "libcudnn_ops.so.9", "libcudnn.so.9", "libcudnn_adv.so.10"):
        (lib / name).write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cuda_env.locate("libcudnn") == str(lib / "libcudnn.so.9")
    monkeypatch.delenv("PLUGGABLE_CUDNN_LIBRARY", raising=False)
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "libpluggable_cuda.so").write_bytes(b"")
    for var in ("PLUGGABLE_CUBLAS_LIBRARY", "PLUGGABLE_CUPTI_LIBRARY", "PLUGGABLE_NCCL_LIBRARY"):
        monkeypatch.setenv(var, "set")
    _cuda_env.configure(str(plugin_dir))
    assert os.environ["PLUGGABLE_CUDNN_LIBRARY"] == str(lib / "libcudnn.so.9")


@pytest.mark.parametrize("folder", ["nvidia/cu13/lib", "nvidia/cuda_cupti/lib",
                                    "nvidia/cu12/lib"])
def test_cupti_locator_finds_nvidia_wheels(tmp_path, monkeypatch, folder):
    """The CUDA 13 wheels share nvidia/cu13/lib; nvidia-cuda-cupti-cu12 has its
    own folder; the newest major wins over an older one elsewhere."""
    from pluggable.plugins import cuda_env as _cuda_env
    lib = tmp_path.joinpath(*folder.split("/"))
    lib.mkdir(parents=True)
    (lib / "libcupti.so.13").write_bytes(b"")
    (tmp_path / "nvidia" / "cuda_cupti" / "lib").mkdir(parents=True, exist_ok=True)
    (tmp_path / "nvidia" / "cuda_cupti" / "lib" / "libcupti.so.12").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cuda_env.locate_cupti() == str(lib / "libcupti.so.13")


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_copies_of_a_tensor_are_the_tensor(device):
    """copy.copy and copy.deepcopy give the tensor itself, as TensorFlow's
    EagerTensor does (matplotlib copies its inputs): a copy never shares and
    frees the core's handle twice."""
    import copy
    import gc
    rng = np.random.default_rng()
    a = rng.standard_normal(50).astype(np.float32)
    kind = device.split(":")[0]
    with pg.device(device):
        t = pg.constant(a) * 2.0
        copies = [copy.copy(t), copy.deepcopy(t), copy.deepcopy([t])[0]]
        assert all(c is t for c in copies)
        del t
        gc.collect()
        with pg.testing.expect_kernel("StridedSlice", kind, min_calls=50):
            values = [float(v) for v in copies[0]]
    np.testing.assert_allclose(values, a * 2.0, rtol=1e-6)
