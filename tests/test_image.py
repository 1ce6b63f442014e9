"""``pg.image`` against ``tf.image`` (in the oracle child) on fresh random
images, on CPU and MY_DEVICE: resize in every supported method (values and
gradients), the flips and rotations, crops and pads, colour functions and
dtype conversion."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg

DEVICES = ["CPU:0", "MY_DEVICE:0"]

RESIZE = """
xt = tf.constant(x)
with tf.GradientTape() as tape:
    tape.watch(xt)
    y = tf.image.resize(xt, size, method=method)
    loss = tf.reduce_sum(y * w)
try:
    result = [y, tape.gradient(loss, xt)]
except LookupError as e:  # ResizeArea has none
    result = [y, str(e)]
"""


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", ["bilinear", "bicubic", "area", "nearest"])
@pytest.mark.parametrize("size", [(9, 4), (3, 11), (5, 7)])
def test_resize_and_its_gradient_match_tensorflow(device, method, size, tf_oracle, rng):
    x = rng.standard_normal((2, 5, 7, 3)).astype(np.float32)
    w = rng.standard_normal((2,) + size + (3,)).astype(np.float32)
    want = tf_oracle.run(RESIZE, x=x, w=w, size=list(size), method=method)
    kernel = "GatherV2" if method == "nearest" else "MatMul"
    with pg.device(device), pg.testing.expect_kernel(kernel, device.split(":")[0]):
        xt = pg.constant(x)
        scope = {"tf": pg, "x": xt, "w": w, "size": size, "method": method}
        exec(RESIZE, scope)
    got = scope["result"]
    if method == "area":
        assert got[1] == want[1] == "gradient registry has no entry for: ResizeArea"
        got, want = got[:1], want[:1]
    for g, ref in zip(got, want):
        assert g.shape == ref.shape and g.dtype.as_numpy_dtype == ref.dtype
        np.testing.assert_allclose(g.numpy(), ref, rtol=1e-5, atol=1e-5, err_msg=rng.seed_text)


IMAGE_FUNCS = """
r = {}
r["flip_lr"] = tf.image.flip_left_right(x)
r["flip_ud"] = tf.image.flip_up_down(x3)
r["transpose"] = tf.image.transpose(x)
r["rot90_1"] = tf.image.rot90(x3)
r["rot90_2"] = tf.image.rot90(x, k=2)
r["rot90_3"] = tf.image.rot90(x3, k=3)
r["gray"] = tf.image.rgb_to_grayscale(x)
r["gray_u8"] = tf.image.rgb_to_grayscale(u8)
r["rgb"] = tf.image.grayscale_to_rgb(r["gray"])
r["bright"] = tf.image.adjust_brightness(x, 0.2)
r["bright_u8"] = tf.image.adjust_brightness(u8, 0.3)
r["contrast"] = tf.image.adjust_contrast(x, 1.7)
r["contrast_u8"] = tf.image.adjust_contrast(u8, 0.6)
r["gamma"] = tf.image.adjust_gamma(tf.abs(x), 0.7, 1.3)
r["gamma_u8"] = tf.image.adjust_gamma(u8, 1.4)
r["standard"] = tf.image.per_image_standardization(x)
r["standard_u8"] = tf.image.per_image_standardization(u8)
r["central"] = tf.image.central_crop(x3, 0.5)
r["crop"] = tf.image.crop_to_bounding_box(x, 1, 2, 3, 4)
r["pad"] = tf.image.pad_to_bounding_box(x3, 2, 1, 9, 10)
r["crop_or_pad"] = tf.image.resize_with_crop_or_pad(x, 8, 4)
r["crop_or_pad_2"] = tf.image.resize_with_crop_or_pad(x3, 3, 12)
r["to_float"] = tf.image.convert_image_dtype(u8, tf.float32)
r["to_u8"] = tf.image.convert_image_dtype(tf.clip_by_value(x, 0.0, 1.0), tf.uint8)
r["to_u8_sat"] = tf.image.convert_image_dtype(x, tf.uint8, saturate=True)
r["u8_to_i32"] = tf.image.convert_image_dtype(u8, tf.int32)
r["i32_to_u8"] = tf.image.convert_image_dtype(i32, tf.uint8)
r["aspect"] = tf.image.resize(x, [10, 10], preserve_aspect_ratio=True)
r["nearest_u8"] = tf.image.resize(u8, [7, 3], method="nearest")
result = r
"""


@pytest.mark.parametrize("device", DEVICES)
def test_image_functions_match_tensorflow(device, tf_oracle, rng):
    x = rng.standard_normal((2, 6, 7, 3)).astype(np.float32)
    x3 = x[0]
    u8 = rng.integers(0, 256, (2, 6, 7, 3)).astype(np.uint8)
    i32 = rng.integers(0, 2 ** 31 - 1, (6, 7, 3)).astype(np.int32)
    want = tf_oracle.run(IMAGE_FUNCS, x=x, x3=x3, u8=u8, i32=i32)
    scope = {"tf": pg, "x": x, "x3": x3, "u8": u8, "i32": i32}
    with pg.device(device):
        exec(IMAGE_FUNCS, scope)
    got = scope["result"]
    assert sorted(got) == sorted(want)
    for name, ref in want.items():
        g = got[name]
        assert g.dtype.as_numpy_dtype == ref.dtype, name
        assert g.device.endswith(device), name
        np.testing.assert_allclose(g.numpy(), ref, rtol=1e-5, atol=1e-5,
                                   err_msg=f"{name} {rng.seed_text}")


def test_adjust_contrast_has_no_gradient_as_in_tensorflow(tf_oracle):
    code = ("image = tf.Variable([[[0.5, 0.0, 0.0]]])\ndelta = tf.Variable(0.1)\n"
            "with tf.GradientTape() as tape:\n"
            "    new_image = tf.image.adjust_contrast(image, delta)\n"
            "try:\n    tape.gradient(new_image, [image, delta])\n    result = 'none'\n"
            "except LookupError as e:\n    result = str(e)\n")
    want = tf_oracle.run(code)
    scope = {"tf": pg}
    exec(code, scope)
    assert scope["result"] == want


def test_bad_images_and_arguments_say_what_is_wrong():
    with pytest.raises(ValueError, match="3-D"):
        pg.image.resize(pg.zeros([4, 4]), [2, 2])
    with pytest.raises(ValueError, match="2 positive integers"):
        pg.image.resize(pg.zeros([4, 4, 1]), [0, 2])
    with pytest.raises(pg.errors.UnimplementedError, match="lanczos3"):
        pg.image.resize(pg.zeros([4, 4, 1]), [2, 2], method="lanczos3")
    with pytest.raises(pg.errors.UnimplementedError, match="antialias"):
        pg.image.resize(pg.zeros([4, 4, 1]), [2, 2], antialias=True)
    with pytest.raises(ValueError, match="does not lie inside"):
        pg.image.crop_to_bounding_box(pg.zeros([4, 4, 1]), 2, 2, 3, 1)
    with pytest.raises(ValueError, match="does not fit"):
        pg.image.pad_to_bounding_box(pg.zeros([4, 4, 1]), 1, 0, 4, 4)
    with pytest.raises(ValueError, match="3 channels"):
        pg.image.rgb_to_grayscale(pg.zeros([4, 4, 2]))
    with pytest.raises(ValueError, match="central_fraction"):
        pg.image.central_crop(pg.zeros([4, 4, 1]), 0.0)
    with pytest.raises(TypeError, match="integer or floating"):
        pg.image.convert_image_dtype(pg.constant([True]), pg.float32)


def test_dtype_limits_are_tensorflows(tf_oracle):
    names = ["uint8", "int8", "int32", "int64", "uint32", "float16", "float32", "float64",
             "bfloat16"]
    want = tf_oracle.run("result = [[float(getattr(tf, n).min), float(getattr(tf, n).max)] "
                         "for n in names]", names=names)
    got = [[float(getattr(pg, n).min), float(getattr(pg, n).max)] for n in names]
    np.testing.assert_array_equal(np.array(got), np.array(want))
    with pytest.raises(TypeError, match="bool"):
        pg.bool.max  # noqa: B018
