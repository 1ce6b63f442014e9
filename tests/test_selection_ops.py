"""The ops whose output shapes depend on values (Where, Unique*,
NonMaxSuppressionV3) against numpy on fresh random inputs, eager and in a
pg.function graph (a dimension unknown until the op runs); under a
MY_DEVICE scope they run on the host by soft placement. The ONNX nodes that
lower to them (NonZero, Unique, NonMaxSuppression) and the other ONNX rows
of this group (Binarizer, ArrayFeatureExtractor, Pow of an unsigned
exponent, Scan-8) against onnxruntime. tests/test_op_semantics.py compares
the ops with TensorFlow."""
import numpy as np
import pytest

import pluggable as pg
from pluggable import errors

rng = np.random.default_rng()
DEVICES = ["CPU:0", "MY_DEVICE:0"]


def _repeats(shape, k=4, dtype=np.float32):
    return rng.standard_normal(k).astype(dtype)[rng.integers(0, k, shape)]


@pytest.mark.parametrize("dev", DEVICES)
def test_where_lists_true_coordinates_in_row_major_order(dev):
    x = np.where(rng.random((4, 5, 3)) < 0.4, 0, rng.standard_normal((4, 5, 3))).astype(np.float32)
    with pg.device(dev), pg.testing.expect_kernel("Where", "CPU"):
        got = pg.raw_ops.Where(input=pg.constant(x))
    np.testing.assert_array_equal(got.numpy(), np.argwhere(x))
    assert got.dtype == pg.int64


def test_where_in_a_graph_has_an_unknown_row_count():
    @pg.function
    def f(x):
        w = pg.raw_ops.Where(input=x)
        assert tuple(w.shape) == (None, 2)
        return pg.raw_ops.Transpose(x=w, perm=np.array([1, 0], np.int32))
    for _ in range(2):   # a new count each call, one graph
        x = rng.random((6, 7)) < 0.3
        np.testing.assert_array_equal(f(pg.constant(x)).numpy(), np.nonzero(x))


def test_where_of_a_scalar_is_refused_as_tensorflow():
    with pytest.raises(errors.InvalidArgumentError, match="Unhandled input dimensions: 0"):
        pg.raw_ops.Where(input=pg.constant(True))


def _first_order(x, axis=0):
    """numpy's unique in order of first occurrence: (y, idx, count)."""
    u, first, inv, cnt = np.unique(x, return_index=True, return_inverse=True,
                                   return_counts=True, axis=axis)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return np.take(u, order, axis=axis), rank[inv.reshape(-1)], cnt[order]


@pytest.mark.parametrize("dev", DEVICES)
def test_unique_with_counts_keeps_first_occurrence_order(dev):
    x = _repeats(20)
    with pg.device(dev), pg.testing.expect_kernel("UniqueWithCounts", "CPU"):
        y, idx, cnt = pg.raw_ops.UniqueWithCounts(x=pg.constant(x), out_idx=pg.int64)
    for g, w in zip((y, idx, cnt), _first_order(x)):
        np.testing.assert_array_equal(g.numpy(), w)
    assert idx.dtype == cnt.dtype == pg.int64


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unique_v2_along_an_axis(axis):
    pool = rng.integers(0, 5, (3, 3, 4)).astype(np.int32)
    x = np.take(pool, rng.integers(0, 3, 7), axis=axis % 3)
    with pg.testing.expect_kernel("UniqueV2", "CPU"):
        y, idx = pg.raw_ops.UniqueV2(x=pg.constant(x), axis=pg.constant(np.array([axis])))
    wy, widx, _ = _first_order(x, axis % 3)
    np.testing.assert_array_equal(y.numpy(), wy)
    np.testing.assert_array_equal(idx.numpy(), widx)


def test_unique_errors_say_what_is_wrong():
    with pytest.raises(errors.InvalidArgumentError, match="unique expects a 1D vector"):
        pg.raw_ops.Unique(x=pg.constant(np.zeros((2, 2), np.float32)))
    with pytest.raises(errors.InvalidArgumentError, match=r"axis has to be between \[0, 2\)"):
        pg.raw_ops.UniqueV2(x=pg.constant(np.zeros((2, 2), np.float32)),
                            axis=pg.constant(np.array([2])))


def _np_nms(boxes, scores, k, iou_t, score_t):
    lo, hi = np.minimum(boxes[:, :2], boxes[:, 2:]), np.maximum(boxes[:, :2], boxes[:, 2:])
    area = np.prod(hi - lo, 1)
    sel = []
    for i in sorted(np.flatnonzero(scores > score_t), key=lambda i: (-scores[i], i)):
        if len(sel) == k:
            break
        inter = [np.prod(np.clip(np.minimum(hi[i], hi[j]) - np.maximum(lo[i], lo[j]), 0, None))
                 for j in sel]
        if all(t / (area[i] + area[j] - t) <= iou_t for t, j in zip(inter, sel)):
            sel.append(i)
    return np.asarray(sel, np.int32)


@pytest.mark.parametrize("dev", DEVICES)
def test_non_max_suppression_v3_matches_greedy_selection(dev):
    n = 40
    corner = rng.uniform(0, 6, (n, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(0.5, 3, (n, 2))], 1).astype(np.float32)
    scores = rng.random(n).astype(np.float32)
    for k, iou_t, score_t in ((10, 0.5, 0.0), (n, 0.2, 0.3), (0, 0.5, 0.0)):
        with pg.device(dev), pg.testing.expect_kernel("NonMaxSuppressionV3", "CPU"):
            got = pg.raw_ops.NonMaxSuppressionV3(
                boxes=pg.constant(boxes), scores=pg.constant(scores),
                max_output_size=pg.constant(np.int32(k)),
                iou_threshold=pg.constant(np.float32(iou_t)),
                score_threshold=pg.constant(np.float32(score_t)))
        np.testing.assert_array_equal(got.numpy(), _np_nms(boxes, scores, k, iou_t, score_t))


def test_non_max_suppression_refuses_a_bad_threshold():
    b = pg.constant(np.zeros((3, 4), np.float32))
    s = pg.constant(np.zeros(3, np.float32))
    with pytest.raises(errors.InvalidArgumentError, match=r"iou_threshold must be in \[0, 1\]"):
        pg.raw_ops.NonMaxSuppressionV3(boxes=b, scores=s, max_output_size=pg.constant(np.int32(2)),
                                       iou_threshold=pg.constant(np.float32(1.5)),
                                       score_threshold=pg.constant(np.float32(0)))
    with pytest.raises(errors.InvalidArgumentError, match="boxes must be 2-D"):
        pg.raw_ops.NonMaxSuppressionV3(boxes=s, scores=s, max_output_size=pg.constant(np.int32(2)),
                                       iou_threshold=pg.constant(np.float32(0.5)),
                                       score_threshold=pg.constant(np.float32(0)))


# ------------------------------------------------------------- ONNX rows

onnx = pytest.importorskip("onnx", reason="ONNX models are read with the onnx package")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (a test extra)")
from onnx import TensorProto as T, helper as h  # noqa: E402


def _model(node, inputs, outputs, opset=17, ml=False):
    g = h.make_graph([node], "m", [h.make_tensor_value_info(*v) for v in inputs],
                     [h.make_tensor_value_info(*v) for v in outputs])
    ops = [h.make_opsetid("", opset)] + ([h.make_opsetid("ai.onnx.ml", 3)] if ml else [])
    return h.make_model(g, opset_imports=ops, ir_version=10)


def _check(m, feeds, dev, host_op=None):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = s.run(None, feeds)
    pm = pg.onnx.import_model(m)
    with pg.device(dev):
        got = pm(feeds)
    for o, w in zip(m.graph.output, want):
        g = got[o.name].numpy()
        assert g.dtype == w.dtype, (o.name, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=o.name)
    if host_op is not None:   # the data-dependent op ran on the host by soft placement
        (cf,) = pm._cache.values()
        placed = {n.assigned.device_type for n in cf.optimized_graph.nodes
                  if n.op == host_op and n.assigned is not None}
        assert placed == {"CPU"}, placed


@pytest.mark.parametrize("dev", DEVICES)
def test_onnx_nonzero(dev):
    x = np.where(rng.random((3, 4, 2)) < 0.5, 0, rng.standard_normal((3, 4, 2))).astype(np.float32)
    m = _model(h.make_node("NonZero", ["x"], ["y"]), [("x", T.FLOAT, [3, 4, 2])],
               [("y", T.INT64, None)])
    _check(m, {"x": x}, dev, "Where")


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("sorted_,axis", [(1, None), (0, None), (1, 0), (0, 1), (1, -1)])
def test_onnx_unique(dev, sorted_, axis):
    if axis is None:
        x = _repeats((6, 4), 5)
    else:   # repeated slices along the axis
        pool = rng.integers(-3, 3, (3, 4) if axis == 0 else (6, 3)).astype(np.float32)
        x = np.take(pool, rng.integers(0, 3, 6 if axis == 0 else 4), axis=axis)
    kw = {"sorted": sorted_} | ({} if axis is None else {"axis": axis})
    m = _model(h.make_node("Unique", ["x"], ["y", "i", "inv", "c"], **kw),
               [("x", T.FLOAT, list(x.shape))],
               [("y", T.FLOAT, None), ("i", T.INT64, None), ("inv", T.INT64, None),
                ("c", T.INT64, None)], opset=11)
    _check(m, {"x": x}, dev, "UniqueWithCountsV2")


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("center", [0, 1])
def test_onnx_non_max_suppression(dev, center):
    b, c, n = 2, 3, 30
    xy = rng.uniform(0, 6, (b, n, 2))
    wh = rng.uniform(0.5, 3, (b, n, 2))
    boxes = np.concatenate([xy, wh] if center else [xy, xy + wh], -1).astype(np.float32)
    scores = rng.random((b, c, n)).astype(np.float32)
    m = _model(h.make_node("NonMaxSuppression", ["b", "s", "k", "iou", "st"], ["y"],
                           center_point_box=center),
               [("b", T.FLOAT, [b, n, 4]), ("s", T.FLOAT, [b, c, n]), ("k", T.INT64, [1]),
                ("iou", T.FLOAT, [1]), ("st", T.FLOAT, [1])], [("y", T.INT64, None)], opset=11)
    _check(m, {"b": boxes, "s": scores, "k": np.array([5]), "iou": np.array([0.4], np.float32),
               "st": np.array([0.2], np.float32)}, dev, "NonMaxSuppressionV3")


@pytest.mark.parametrize("dev", DEVICES)
def test_onnx_ml_binarizer_and_array_feature_extractor(dev):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    m = _model(h.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.3),
               [("x", T.FLOAT, [4, 6])], [("y", T.FLOAT, [4, 6])], ml=True)
    _check(m, {"x": x}, dev)
    idx = rng.integers(0, 6, 3)
    m = _model(h.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml"),
               [("x", T.FLOAT, [4, 6]), ("i", T.INT64, [3])], [("y", T.FLOAT, None)], ml=True)
    _check(m, {"x": x, "i": idx}, dev)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("tp,npt", [(T.UINT32, np.uint32), (T.UINT64, np.uint64)])
def test_onnx_pow_of_an_unsigned_exponent(dev, tp, npt):
    x = rng.uniform(0.5, 1.5, 6).astype(np.float32)
    e = rng.integers(0, 6, 6).astype(npt)
    x[0], e[0] = 1.0, np.iinfo(npt).max - 7   # an exponent past the signed range
    m = _model(h.make_node("Pow", ["x", "e"], ["y"]), [("x", T.FLOAT, [6]), ("e", tp, [6])],
               [("y", T.FLOAT, [6])], opset=15)
    with pg.device(dev):   # (onnxruntime has no kernel for an unsigned exponent)
        got = pg.onnx.import_model(m)(x=x, e=e)["y"].numpy()
    np.testing.assert_allclose(got, np.power(x.astype(np.float64), e.astype(np.float64)),
                               rtol=1e-6)


@pytest.mark.parametrize("dev", DEVICES)
def test_onnx_scatter_reduction_mul_multiplies_repeated_indices_in_turn(dev):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    idx = np.array([[1], [3], [1], [0]], np.int64)          # row 1 twice
    upd = rng.standard_normal((4, 3)).astype(np.float32)
    m = _model(h.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="mul"),
               [("x", T.FLOAT, [5, 3]), ("i", T.INT64, [4, 1]), ("u", T.FLOAT, [4, 3])],
               [("y", T.FLOAT, [5, 3])], opset=18)
    _check(m, {"x": x, "i": idx, "u": upd}, dev)
    want = x.copy()
    for (r,), u in zip(idx, upd):
        want[r] *= u
    with pg.device(dev):
        got = pg.onnx.import_model(m)(x=x, i=idx, u=upd)["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    ei = rng.integers(0, 3, (5, 2))
    eu = rng.standard_normal((5, 2)).astype(np.float32)
    m = _model(h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction="mul"),
               [("x", T.FLOAT, [5, 3]), ("i", T.INT64, [5, 2]), ("u", T.FLOAT, [5, 2])],
               [("y", T.FLOAT, [5, 3])], opset=18)
    _check(m, {"x": x, "i": ei, "u": eu}, dev)


@pytest.mark.parametrize("dev", DEVICES)
def test_onnx_bernoulli_and_random_uniform_like(dev):
    p = rng.random(4000).astype(np.float32)
    p[:10], p[10:20] = 0.0, 1.0
    m = _model(h.make_node("Bernoulli", ["p"], ["y"], seed=7.0, dtype=T.DOUBLE),
               [("p", T.FLOAT, [4000])], [("y", T.DOUBLE, [4000])], opset=15)
    with pg.device(dev):
        y = pg.onnx.import_model(m)(p=p)["y"].numpy()
        again = pg.onnx.import_model(m)(p=p)["y"].numpy()
    assert y.dtype == np.float64 and set(np.unique(y)) <= {0.0, 1.0}
    assert (y[:10] == 0).all() and (y[10:20] == 1).all()
    assert abs(y.mean() - p.mean()) < 0.05          # about 4 standard deviations
    np.testing.assert_array_equal(y, again)          # one seed, one draw
    m = _model(h.make_node("RandomUniformLike", ["x"], ["y"], low=-2.0, high=3.0),
               [("x", T.FLOAT, [50, 40])], [("y", T.FLOAT, [50, 40])], opset=15)
    with pg.device(dev):
        u = pg.onnx.import_model(m)(x=np.zeros((50, 40), np.float32))["y"].numpy()
    assert u.dtype == np.float32 and u.shape == (50, 40)
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.15


@pytest.mark.parametrize("dev", DEVICES)
def test_onnx_dropout_in_training_mode_drops_and_scales(dev):
    x = rng.standard_normal((40, 50)).astype(np.float32)
    m = _model(h.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=3),
               [("x", T.FLOAT, [40, 50]), ("r", T.FLOAT, []), ("t", T.BOOL, [])],
               [("y", T.FLOAT, [40, 50]), ("mask", T.BOOL, [40, 50])], opset=13)
    pm = pg.onnx.import_model(m)
    with pg.device(dev):
        out = pm(x=x, r=np.float32(0.25), t=np.bool_(True))
        off = pm(x=x, r=np.float32(0.25), t=np.bool_(False))
    y, mask = out["y"].numpy(), out["mask"].numpy()
    np.testing.assert_allclose(y, np.where(mask, x / 0.75, 0), rtol=1e-6)
    assert abs(mask.mean() - 0.75) < 0.05
    np.testing.assert_array_equal(off["y"].numpy(), x)
    assert off["mask"].numpy().all()


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_onnx_tensor_scatter_matches_the_reference_evaluator(dev, mode):
    from onnx.reference import ReferenceEvaluator
    past = rng.standard_normal((3, 2, 8, 4)).astype(np.float32)
    upd = rng.standard_normal((3, 2, 3, 4)).astype(np.float32)
    wi = rng.integers(0, 8 if mode == "circular" else 6, 3).astype(np.int64)
    m = _model(h.make_node("TensorScatter", ["p", "u", "w"], ["y"], mode=mode),
               [("p", T.FLOAT, [3, 2, 8, 4]), ("u", T.FLOAT, [3, 2, 3, 4]), ("w", T.INT64, [3])],
               [("y", T.FLOAT, [3, 2, 8, 4])], opset=24)
    want = ReferenceEvaluator(m).run(None, {"p": past, "u": upd, "w": wi})[0]
    with pg.device(dev):
        got = pg.onnx.import_model(m)(p=past, u=upd, w=wi)["y"].numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dt,npt,tol", [(T.FLOAT, np.float32, 1e-5), (T.FLOAT16, np.float16, 2e-3)])
def test_onnx_flex_attention_matches_the_reference_evaluator(dev, dt, npt, tol):
    from onnx.reference import ReferenceEvaluator
    b, hq, hkv, L, S, E = 2, 4, 2, 5, 7, 8
    score_mod = h.make_graph(   # a soft cap: 5 * tanh(scores / 5)
        [h.make_node("Div", ["scores", "cap"], ["d"]), h.make_node("Tanh", ["d"], ["t"]),
         h.make_node("Mul", ["t", "cap"], ["out"])], "cap",
        [h.make_tensor_value_info("scores", T.FLOAT, None)],
        [h.make_tensor_value_info("out", T.FLOAT, None)],
        [h.make_tensor("cap", T.FLOAT, [], [5.0])])
    node = h.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview",
                       scale=0.3, score_mod=score_mod)
    g = h.make_graph([node], "m", [h.make_tensor_value_info("q", dt, [b, hq, L, E]),
                                   h.make_tensor_value_info("k", dt, [b, hkv, S, E]),
                                   h.make_tensor_value_info("v", dt, [b, hkv, S, E])],
                     [h.make_tensor_value_info("y", dt, [b, hq, L, E])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 26),
                                       h.make_opsetid("ai.onnx.preview", 1)], ir_version=11)
    feeds = {n: rng.standard_normal(s).astype(npt) for n, s in
             (("q", (b, hq, L, E)), ("k", (b, hkv, S, E)), ("v", (b, hkv, S, E)))}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    with pg.device(dev):
        got = pg.onnx.import_model(m)(feeds)["y"].numpy()
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("dev", DEVICES)
def test_onnx_deform_conv_matches_the_reference_evaluator(dev):
    from onnx.reference import ReferenceEvaluator
    n, ch, hh, ww, oc, kh, kw = 2, 4, 7, 6, 6, 3, 2
    strides, dil, pads = [2, 1], [1, 2], [1, 0, 1, 1]
    oh = (hh + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) // strides[0] + 1
    ow = (ww + pads[1] + pads[3] - ((kw - 1) * dil[1] + 1)) // strides[1] + 1
    shapes = {"x": (n, ch, hh, ww), "w": (oc, ch // 2, kh, kw), "off": (n, 2 * kh * kw * 2, oh, ow),
              "b": (oc,), "m": (n, 2 * kh * kw, oh, ow)}
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    feeds["off"] *= 2.0                                # taps that leave the image
    node = h.make_node("DeformConv", ["x", "w", "off", "b", "m"], ["y"], group=2,
                       offset_group=2, strides=strides, dilations=dil, pads=pads,
                       kernel_shape=[kh, kw])
    m = _model(node, [(k, T.FLOAT, list(s)) for k, s in shapes.items()],
               [("y", T.FLOAT, None)], opset=19)
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    with pg.device(dev):
        got = pg.onnx.import_model(m)(feeds)["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dev", DEVICES)
def test_onnx_sequence_input_is_fed_as_a_list(dev):
    seq = h.make_tensor_sequence_value_info("s", T.FLOAT, None)
    nodes = [h.make_node("SequenceInsert", ["s", "x"], ["s2"]),
             h.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0)]
    g = h.make_graph(nodes, "m", [seq, h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    items = [rng.standard_normal((n, 3)).astype(np.float32) for n in (1, 4)]
    x = rng.standard_normal((2, 3)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"s": items, "x": x})
    pm = pg.onnx.import_model(m)
    assert pm.inputs[0].sequence
    with pg.device(dev):
        np.testing.assert_array_equal(pm(s=items, x=x)["y"].numpy(), want[0])
        np.testing.assert_array_equal(pm(s=items[:1], x=x)["y"].numpy(),
                                      np.concatenate([items[0], x]))
        with pytest.raises(errors.InvalidArgumentError, match="feed a list of tensors"):
            pm(s=items[0], x=x)


def _random_ensemble(n_trees, depth, n_feat, n_targets):
    """Full binary trees of `depth` with random tests (every mode, one
    set-membership node per tree), leaves shared out over the targets."""
    nodes = {k: [] for k in ("modes", "feat", "split", "tn", "fn", "tl", "fl", "track")}
    members, leaf_w, leaf_t, roots = [], [], [], []

    def build(d):
        i = len(nodes["modes"])
        mode = int(rng.integers(0, 7))
        for k, v in (("modes", mode), ("feat", int(rng.integers(0, n_feat))),
                     ("split", float(rng.integers(-2, 3))), ("track", int(rng.integers(0, 2)))):
            nodes[k].append(v)
        for k in ("tn", "fn", "tl", "fl"):
            nodes[k].append(0)
        if mode == 6:
            # (no member 0: onnx's reference evaluator ends a set at a falsy member)
            members.extend([float(v) for v in rng.choice([-2, -1, 1, 2], 2, replace=False)]
                           + [np.nan])
        for side in ("t", "f"):
            if d == depth:
                nodes[side + "n"][i], nodes[side + "l"][i] = len(leaf_w), 1
                leaf_w.append(float(rng.standard_normal()))
                leaf_t.append(int(rng.integers(0, n_targets)))
            else:
                nodes[side + "n"][i] = build(d + 1)
        return i
    for _ in range(n_trees):
        roots.append(build(1))
    return nodes, members, leaf_w, leaf_t, roots


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("agg", [0, 1, 2, 3])
def test_onnx_ml_tree_ensemble_matches_the_reference_evaluator(dev, agg):
    from onnx.reference import ReferenceEvaluator
    nodes, members, leaf_w, leaf_t, roots = _random_ensemble(3, 3, 4, 2)
    node = h.make_node(
        "TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", n_targets=2, aggregate_function=agg,
        nodes_modes=h.make_tensor("m", T.UINT8, [len(nodes["modes"])], nodes["modes"]),
        nodes_featureids=nodes["feat"], nodes_truenodeids=nodes["tn"],
        nodes_falsenodeids=nodes["fn"], nodes_trueleafs=nodes["tl"],
        nodes_falseleafs=nodes["fl"], nodes_missing_value_tracks_true=nodes["track"],
        nodes_splits=h.make_tensor("s", T.FLOAT, [len(nodes["split"])], nodes["split"]),
        leaf_weights=h.make_tensor("w", T.FLOAT, [len(leaf_w)], leaf_w),
        leaf_targetids=leaf_t, tree_roots=roots,
        **({"membership_values": h.make_tensor("mv", T.FLOAT, [len(members)], members)}
           if members else {}))
    g = h.make_graph([node], "m", [h.make_tensor_value_info("x", T.FLOAT, [40, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 21), h.make_opsetid("ai.onnx.ml", 5)],
                     ir_version=10)
    x = rng.integers(-3, 4, (40, 4)).astype(np.float32)     # ties with the splits
    x[rng.random(x.shape) < 0.1] = np.nan
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    with pg.device(dev):
        got = pg.onnx.import_model(m)(x=x)["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_onnx_unique_of_bools_sorts_them():
    from onnx.reference import ReferenceEvaluator
    x = rng.random(15) < 0.5
    m = _model(h.make_node("Unique", ["x"], ["y", "i", "inv", "c"]), [("x", T.BOOL, [15])],
               [("y", T.BOOL, None), ("i", T.INT64, None), ("inv", T.INT64, None),
                ("c", T.INT64, None)], opset=11)
    want = ReferenceEvaluator(m).run(None, {"x": x})
    got = pg.onnx.import_model(m)(x=x)
    for o, w in zip(m.graph.output, want):
        np.testing.assert_array_equal(got[o.name].numpy(), w, err_msg=o.name)
