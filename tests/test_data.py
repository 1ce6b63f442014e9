"""pg.data.Dataset against tf.data on fresh random data: the same pipeline
source runs here (lib = pluggable) and in a TensorFlow child process
(lib = tensorflow), and the elements, element_spec and cardinality must
agree. Shuffling is checked for TensorFlow's guarantees (a permutation,
reproducible with a seed, different across epochs), not its exact order."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import errors

D = pg.data.Dataset


def _elements(ds) -> list:
    return list(ds.as_numpy_iterator())


def _spec_text(spec) -> object:
    if isinstance(spec, dict):
        return {k: _spec_text(v) for k, v in spec.items()}
    if isinstance(spec, (tuple, list)):
        return [_spec_text(s) for s in spec]
    return (None if spec.shape is None else [d for d in spec.shape], spec.dtype.name)


TF_SPEC = """
def spec_text(spec):
    if isinstance(spec, dict):
        return {k: spec_text(v) for k, v in spec.items()}
    if isinstance(spec, (tuple, list)):
        return [spec_text(s) for s in spec]
    return (None if spec.shape.rank is None else list(spec.shape.as_list()), spec.dtype.name)
"""

PIPELINES = {
    "slices_map_batch": """
ds = lib.data.Dataset.from_tensor_slices((x, labels)).map(
    lambda a, b: (a * 2.0 + 1.0, b), num_parallel_calls=lib.data.AUTOTUNE).batch(4)
""",
    "dict_batch_drop": """
ds = lib.data.Dataset.from_tensor_slices({"feat": x, "label": labels}).batch(
    3, drop_remainder=True)
""",
    "range_filter_take_skip": """
ds = lib.data.Dataset.range(3, 40, 2).filter(lambda v: v % 3 == 0).skip(1).take(4)
""",
    "repeat_take": """
ds = lib.data.Dataset.from_tensor_slices(labels).repeat(3).take(20)
""",
    "zip_unbatch": """
ds = lib.data.Dataset.zip((lib.data.Dataset.from_tensor_slices(x),
                           lib.data.Dataset.range(100))).batch(5).unbatch()
""",
    "from_tensors_cache_prefetch": """
ds = lib.data.Dataset.from_tensors(x).repeat(2).cache().prefetch(lib.data.AUTOTUNE)
""",
    "generator_padded_batch": """
def gen():
    for n in lengths:
        yield np.arange(n, dtype=np.int32), np.float32(n)
ds = lib.data.Dataset.from_generator(gen, output_signature=(
    lib.TensorSpec([None], lib.int32), lib.TensorSpec([], lib.float32))).padded_batch(
    3, padding_values=(-1, 0.0))
""",
    "generator_converts_to_signature": """
def gen():
    for n in lengths:
        yield {"wide": np.arange(3, dtype=np.float64) * n, "count": n}
ds = lib.data.Dataset.from_generator(gen, output_signature={
    "wide": lib.TensorSpec([3], lib.float32), "count": lib.TensorSpec([], lib.int64)})
""",
    "concatenate_enumerate": """
ds = lib.data.Dataset.range(4).concatenate(lib.data.Dataset.range(10, 12)).enumerate(5)
""",
}


def _inputs(rng) -> dict:
    return {"x": rng.standard_normal((10, 3)).astype(np.float32),
            "labels": rng.integers(0, 100, 10).astype(np.int64),
            "lengths": [int(n) for n in rng.integers(0, 6, 7)]}


def _run_here(code: str, inputs: dict) -> dict:
    scope = {"lib": pg, "np": np, **inputs}
    exec(code, scope)
    ds = scope["ds"]
    return {"elements": _elements(ds), "spec": _spec_text(ds.element_spec),
            "cardinality": int(ds.cardinality().numpy())}


def _assert_same(ours, theirs) -> None:
    if isinstance(ours, dict):
        assert isinstance(theirs, dict) and sorted(ours) == sorted(theirs)
        for k in ours:
            _assert_same(ours[k], theirs[k])
    elif isinstance(ours, (tuple, list)):
        assert isinstance(theirs, (tuple, list)) and len(ours) == len(theirs), (ours, theirs)
        for a, b in zip(ours, theirs):
            _assert_same(a, b)
    else:
        a, b = np.asarray(ours), np.asarray(theirs)
        assert a.dtype == b.dtype and a.shape == b.shape, (a, b)
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_pipeline_matches_tf_data(name, rng, tf_oracle):
    inputs = _inputs(rng)
    ours = _run_here(PIPELINES[name], inputs)
    theirs = tf_oracle.run("lib = tf\n" + TF_SPEC + PIPELINES[name] + """
result = {"elements": list(ds.as_numpy_iterator()), "spec": spec_text(ds.element_spec),
          "cardinality": int(ds.cardinality())}
""", **inputs)
    assert _normal(ours["spec"]) == _normal(theirs["spec"])
    assert ours["cardinality"] == theirs["cardinality"]
    _assert_same(ours["elements"], theirs["elements"])


def _normal(spec):
    if isinstance(spec, dict):
        return {k: _normal(v) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)) and len(spec) == 2 and isinstance(spec[1], str):
        return (spec[0], spec[1])
    if isinstance(spec, (list, tuple)):
        return [_normal(s) for s in spec]
    return spec


def test_cardinality_of_infinite_and_unknown_matches_tf(tf_oracle):
    code = """
r = lib.data.Dataset.range(5)
cases = [r.repeat(), r.filter(lambda v: v > 2), r.repeat().take(7), r.repeat().batch(2),
         r.repeat().skip(3), lib.data.Dataset.zip((r, r.repeat())), r.take(-1), r.skip(9)]
"""
    scope = {"lib": pg}
    exec(code, scope)
    ours = [int(d.cardinality().numpy()) for d in scope["cases"]]
    theirs = tf_oracle.run("lib = tf\n" + code + "result = [int(d.cardinality()) for d in cases]")
    assert ours == theirs
    assert pg.data.INFINITE_CARDINALITY == -1 and pg.data.UNKNOWN_CARDINALITY == -2
    with pytest.raises(TypeError):
        len(scope["cases"][0])


def test_shuffle_is_a_reproducible_permutation_reshuffled_each_epoch(rng):
    n = 50
    seed = int(rng.integers(1 << 30))
    ds = D.range(n).shuffle(16, seed=seed)
    first, second = _elements(ds), _elements(ds)
    assert sorted(first) == list(range(n)) and sorted(second) == list(range(n))
    assert first != list(range(n)) and first != second       # reshuffled per epoch
    again = D.range(n).shuffle(16, seed=seed)
    assert _elements(again) == first and _elements(again) == second  # same seed, same orders
    fixed = D.range(n).shuffle(16, seed=seed, reshuffle_each_iteration=False)
    assert _elements(fixed) == _elements(fixed)
    # A buffer of 1 keeps the order, as in TensorFlow.
    assert _elements(D.range(n).shuffle(1, seed=seed)) == list(range(n))


def _prefetch_threads() -> list:
    """The pipeline's threads still alive (prefetch and parallel map workers)."""
    return [t for t in threading.enumerate() if t.name.startswith("pg-data-") and t.is_alive()]


def test_failing_map_is_a_typed_error_naming_it_and_the_element(rng):
    bad = int(rng.integers(2, 9))

    def explode(v):
        if int(v.numpy()) == bad:
            raise ValueError("no good")
        return v

    def fragile(v):
        return pg.py_function(explode, [v], pg.int64)
    ds = D.range(10).map(fragile, num_parallel_calls=3).prefetch(2)
    it = iter(ds)
    got = []
    with pytest.raises(errors.InvalidArgumentError) as info:
        for v in it:
            got.append(int(v.numpy()))
    msg = str(info.value)
    assert "Dataset.map(fragile)" in msg and f"element {bad}" in msg and "no good" in msg
    assert got == list(range(bad))
    assert list(it) == []                       # finished cleanly
    deadline = time.monotonic() + 5
    while _prefetch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _prefetch_threads() == []
    assert _elements(D.range(bad).map(fragile)) == list(range(bad))  # nothing else changed


def test_map_that_cannot_be_traced_fails_at_map_and_makes_nothing():
    def needs_value(v):
        return v if v.numpy() > 0 else -v      # Python control flow on a tensor
    with pytest.raises(errors.InvalidArgumentError, match=r"Dataset\.map\(needs_value\) failed "
                       "while its function was traced"):
        D.range(3).map(needs_value)


def test_generator_errors_name_the_element():
    def gen():
        yield np.float32(1.0)
        yield "text"
    ds = D.from_generator(gen, output_signature=pg.TensorSpec([], pg.float32))
    with pytest.raises(errors.InvalidArgumentError, match=r"from_generator\(gen\).*element 1"):
        _elements(ds)

    def broken():
        yield np.float32(0)
        raise KeyError("lost")
    with pytest.raises(errors.UnknownError, match=r"from_generator\(broken\).*element 1.*lost"):
        _elements(D.from_generator(broken, output_signature=pg.TensorSpec([], pg.float32)))


def test_batch_of_different_shapes_is_an_error_naming_the_elements():
    def gen():
        yield np.zeros(3, np.float32)
        yield np.zeros(2, np.float32)
    ds = D.from_generator(gen, output_signature=pg.TensorSpec([None], pg.float32)).batch(2)
    with pytest.raises(errors.InvalidArgumentError, match="element 0 has shape .3. and element "
                       "1 has shape .2."):
        _elements(ds)


def test_from_tensor_slices_needs_one_first_size(rng):
    with pytest.raises(errors.InvalidArgumentError, match="same size in their first"):
        D.from_tensor_slices((rng.standard_normal(3), rng.standard_normal(4)))


def test_prefetch_works_ahead_into_a_bounded_buffer_and_stops_when_closed():
    made = []

    def gen():
        for i in range(1000):
            made.append(i)
            yield np.int64(i)
    ds = D.from_generator(gen, output_signature=pg.TensorSpec([], pg.int64)).prefetch(3)
    it = iter(ds)
    assert int(next(it).numpy()) == 0
    deadline = time.monotonic() + 5
    while len(made) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)                    # the thread works ahead of the consumer ...
    assert len(made) >= 4
    time.sleep(0.2)
    assert len(made) <= 1 + 3 + 1           # ... up to the buffer (and one waiting to go in)
    it.close()
    deadline = time.monotonic() + 5
    while _prefetch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _prefetch_threads() == []


def test_iteration_inside_pg_function_runs_at_each_call(rng):
    x = rng.standard_normal((6, 2)).astype(np.float32)
    ds = D.from_tensor_slices(x).map(lambda v: v * 3.0)

    @pg.function
    def total(ds):
        s = pg.zeros([2])
        for v in ds:
            s = s + v
        return s
    np.testing.assert_allclose(total(ds).numpy(), (x * 3).sum(0), rtol=1e-5)
    np.testing.assert_allclose(total(ds).numpy(), (x * 3).sum(0), rtol=1e-5)
    assert total.tracing_count == 1

    it = iter(D.from_tensor_slices(x))

    @pg.function
    def step(it):
        return next(it) * 2.0
    for i in range(6):
        np.testing.assert_allclose(step(it).numpy(), x[i] * 2)
    with pytest.raises(errors.OutOfRangeError):
        step(it)
    with pytest.raises(errors.UnimplementedError, match="infinite"):
        total(D.from_tensor_slices(x).repeat())


@pytest.mark.parametrize("stages", ["map", "map_parallel_prefetch"])
def test_pipelines_run_on_the_host_whatever_the_device_scope(stages, rng):
    x = rng.standard_normal((6, 2)).astype(np.float32)
    ds = D.from_tensor_slices(x).map(lambda v: v + 1.0,
                                     num_parallel_calls=2 if "parallel" in stages else None)
    if "prefetch" in stages:
        ds = ds.prefetch(2)
    with pg.device("MY_DEVICE:0"):
        got = list(ds)
    assert all(t.device.endswith("device:CPU:0") for t in got), [t.device for t in got]
    np.testing.assert_allclose(np.stack([t.numpy() for t in got]), x + 1.0, rtol=1e-6)


def test_failing_filter_names_it_and_the_element(rng):
    bad = int(rng.integers(0, 6))

    def check(v):
        if int(v.numpy()) == bad:
            raise NotImplementedError("cannot judge")
        return True

    def keep(v):
        return pg.py_function(check, [v], pg.bool)
    with pytest.raises(errors.UnimplementedError,
                       match=rf"Dataset\.filter\(keep\) failed on element {bad}.*cannot judge"):
        _elements(D.range(6).filter(keep))
    with pytest.raises(errors.InvalidArgumentError, match="scalar bool"):
        D.range(3).filter(lambda v: v * 2)


TEXT_LINES = """
texts = []
ds = lib.data.TextLineDataset(path)
texts.append(int(ds.cardinality()))
texts += [str(x) for x in ds.batch(2)]
texts += [str(x) for x in lib.data.TextLineDataset([path, path]).map(lambda s: s + "!").take(7)]
result = texts
"""


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_text_line_dataset_matches_tensorflow(tf_oracle, rng, tmp_path, device):
    lines = ["".join(rng.choice(list("abc xyz"), rng.integers(0, 8))) for _ in range(5)]
    path = tmp_path / "lines.txt"
    path.write_bytes(("\n".join(lines[:3]) + "\r\n" + "\n".join(lines[3:])).encode())
    theirs = tf_oracle.run("lib = tf\n" + TEXT_LINES, path=str(path))
    scope = {"lib": pg, "path": str(path)}
    with pg.device(device), pg.testing.expect_kernel("Add", "CPU", min_calls=7):
        exec(TEXT_LINES, scope)
    assert scope["result"] == theirs
    with pytest.raises(pg.errors.NotFoundError, match="missing.txt"):
        list(pg.data.TextLineDataset(str(tmp_path / "missing.txt")))


def test_map_to_a_range_of_each_element_as_tensorflow(tf_oracle, rng):
    """pg.range of a symbolic tensor (a traced function, a dataset's map)
    keeps it symbolic: elements of data-dependent length."""
    n = rng.integers(0, 7, 4).astype(np.int32)
    want = tf_oracle.run("result = [e.numpy() for e in "
                         "tf.data.Dataset.from_tensor_slices(n).map(tf.range)] + "
                         "[tf.function(lambda k: tf.range(k, 10, 2))(n[0])]", n=n)
    got = [e.numpy() for e in pg.data.Dataset.from_tensor_slices(n).map(pg.range)]
    got.append(pg.function(lambda k: pg.range(k, 10, 2))(n[0]).numpy())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
