"""``pg.image``: TensorFlow's basic image functions over images of shape
``[height, width, channels]`` or batches ``[batch, height, width, channels]``.

They are made of the op set, so they run on every device that has its
element-wise, gather and matrix-product kernels, and are differentiable
where TensorFlow's are. ``resize`` applies one interpolation matrix per
spatial axis, built from TensorFlow 2's sampling rules (half-pixel
centres for bilinear, bicubic and nearest; box averages for area), as two
matrix products (``nearest``: two gathers, exact for every dtype). Where
TensorFlow has no gradient (area resizing, ``adjust_contrast``), a
gradient through the function raises LookupError as TensorFlow's does."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..autodiff.custom_gradient import custom_gradient
from ..framework import dtypes, errors
from ..ops import array_ops, math_ops
from ..runtime.tensors import convert_to_tensor

__all__ = [
    "ResizeMethod", "resize", "flip_left_right", "flip_up_down", "rot90", "transpose",
    "rgb_to_grayscale", "grayscale_to_rgb", "adjust_brightness", "adjust_contrast",
    "adjust_gamma", "per_image_standardization", "central_crop", "crop_to_bounding_box",
    "pad_to_bounding_box", "resize_with_crop_or_pad", "convert_image_dtype",
]


class ResizeMethod:
    """The method names of ``resize`` (``tf.image.ResizeMethod``)."""
    BILINEAR = "bilinear"
    NEAREST_NEIGHBOR = "nearest"
    BICUBIC = "bicubic"
    AREA = "area"
    LANCZOS3 = "lanczos3"
    LANCZOS5 = "lanczos5"
    GAUSSIAN = "gaussian"
    MITCHELLCUBIC = "mitchellcubic"


_METHODS = ("bilinear", "nearest", "bicubic", "area")


def _image(image: Any, fn: str) -> Any:
    x = convert_to_tensor(image)
    if x.shape.rank not in (3, 4):
        raise ValueError(f"{fn}: 'image' must be 3-D [height, width, channels] or 4-D "
                         f"[batch, height, width, channels], got shape {x.shape}")
    return x


def _hw(x: Any, fn: str) -> tuple:
    h, w = x.shape[-3], x.shape[-2]
    if h is None or w is None:
        raise ValueError(f"{fn}: the height and width of the images must be known, got "
                         f"shape {x.shape}")
    return int(h), int(w)


# ------------------------------------------------------------------ resize
def _bilinear(n_in: int, n_out: int) -> np.ndarray:
    scale = n_in / n_out
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        src = (o + 0.5) * scale - 0.5
        lo = math.floor(src)
        frac = src - lo
        m[o, min(max(lo, 0), n_in - 1)] += 1.0 - frac
        m[o, min(max(lo + 1, 0), n_in - 1)] += frac
    return m


def _bicubic(n_in: int, n_out: int) -> np.ndarray:
    """Keys' cubic (a = -0.5) at half-pixel centres, the fraction rounded to
    1/1024 as TensorFlow's weight table is; taps outside the image get no
    weight and the rest are renormalised (TensorFlow's ResizeBicubic with
    half_pixel_centers)."""
    a, scale = -0.5, np.float32(n_in / n_out)
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        src = float(np.float32((o + 0.5) * scale - 0.5))
        base = math.floor(src)
        t = round((src - base) * 1024) / 1024
        taps = [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
                ((a + 2) * t - (a + 3)) * t * t + 1,
                ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
                ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a]
        total = 0.0
        for k, wgt in enumerate(taps):
            i = base - 1 + k
            if 0 <= i < n_in:
                m[o, i] += wgt
                total += wgt
        m[o] /= total
    return m


def _area(n_in: int, n_out: int) -> np.ndarray:
    """The box [o * scale, (o + 1) * scale) of the input, each input pixel
    weighted by its overlap (TensorFlow's ResizeArea)."""
    scale = n_in / n_out
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        y0, y1 = o * scale, (o + 1) * scale
        for i in range(math.floor(y0), min(math.ceil(y1), n_in)):
            m[o, i] = (min(i + 1, y1) - max(i, y0)) / scale
    return m


def _nearest(n_in: int, n_out: int) -> np.ndarray:
    scale = n_in / n_out
    return np.array([min(math.floor((o + 0.5) * scale), n_in - 1) for o in range(n_out)],
                    np.int32)


def _size(size: Any, h: int, w: int, preserve_aspect_ratio: bool) -> tuple:
    try:
        out = [int(s) for s in np.asarray(size).reshape(-1)]
    except (TypeError, ValueError):
        raise ValueError(f"resize: 'size' must be 2 known integers [new_height, new_width], "
                         f"got {size!r}") from None
    if len(out) != 2 or min(out) <= 0:
        raise ValueError(f"resize: 'size' must be 2 positive integers [new_height, "
                         f"new_width], got {out}")
    if preserve_aspect_ratio:
        scale = min(out[0] / h, out[1] / w)
        out = [max(int(round(h * scale)), 1), max(int(round(w * scale)), 1)]
    return tuple(out)


def resize(images: Any, size: Any, method: str = ResizeMethod.BILINEAR,
           preserve_aspect_ratio: bool = False, antialias: bool = False,
           name: str | None = None) -> Any:
    """`images` resized to ``size = [new_height, new_width]`` (``tf.image.resize``).
    Bilinear, bicubic and area give float32 (float64 stays float64);
    nearest keeps the dtype. ``antialias=True`` and the kernel methods
    (lanczos, gaussian, mitchellcubic) are not supported."""
    x = _image(images, "resize")
    h, w = _hw(x, "resize")
    oh, ow = _size(size, h, w, preserve_aspect_ratio)
    method = getattr(method, "value", method)
    if method not in _METHODS:
        raise errors.UnimplementedError(
            f"resize: method {method!r} is not supported; use one of {', '.join(_METHODS)}")
    if antialias:
        raise errors.UnimplementedError(
            "resize: antialias=True is not supported; resize without it (the same for "
            "upsampling) or use method='area' to downsample")
    if method == "nearest":
        y = array_ops.gather(x, _nearest(h, oh), axis=x.shape.rank - 3)
        return array_ops.gather(y, _nearest(w, ow), axis=x.shape.rank - 2)
    x = x if x.dtype in (dtypes.float32, dtypes.float64) else math_ops.cast(x, dtypes.float32)
    make = {"bilinear": _bilinear, "bicubic": _bicubic, "area": _area}[method]
    my = convert_to_tensor(make(h, oh), x.dtype)
    mx = convert_to_tensor(make(w, ow), x.dtype)
    if method == "area":   # as in TensorFlow, ResizeArea has no gradient
        return _no_gradient("ResizeArea", _separable, x, my, mx)
    return _separable(x, my, mx)


def _no_gradient(op: str, fn: Any, x: Any, *args: Any) -> Any:
    @custom_gradient
    def forward(x: Any) -> tuple:
        def grad(dy: Any) -> Any:
            raise LookupError(f"gradient registry has no entry for: {op}")
        return fn(x, *args), grad
    return forward(x)


def _separable(x: Any, my: Any, mx: Any) -> Any:
    """`x` [B, H, W, C] or [H, W, C] with `my` [oh, H] applied along the
    height and `mx` [ow, W] along the width."""
    h, w = _hw(x, "resize")
    oh, ow = my.shape[0], mx.shape[0]
    single = x.shape.rank == 3
    if single:
        x = array_ops.expand_dims(x, 0)
    b, c = array_ops.shape(x)[0], array_ops.shape(x)[3]
    # [H, B*W*C] rows by the height matrix, then [W, B*oh*C] by the width one.
    y = math_ops.reshape(math_ops.transpose(x, [1, 0, 2, 3]), [h, -1])
    y = math_ops.reshape(math_ops.matmul(my, y), array_ops.stack([oh, b, w, c]))
    y = math_ops.reshape(math_ops.transpose(y, [2, 1, 0, 3]), [w, -1])
    y = math_ops.reshape(math_ops.matmul(mx, y), array_ops.stack([ow, b, oh, c]))
    y = math_ops.transpose(y, [1, 2, 0, 3])
    return array_ops.squeeze(y, [0]) if single else y


# ------------------------------------------------------------ geometry
def flip_left_right(image: Any) -> Any:
    """`image` mirrored along its width."""
    x = _image(image, "flip_left_right")
    return array_ops.reverse(x, [x.shape.rank - 2])


def flip_up_down(image: Any) -> Any:
    """`image` mirrored along its height."""
    x = _image(image, "flip_up_down")
    return array_ops.reverse(x, [x.shape.rank - 3])


def transpose(image: Any, name: str | None = None) -> Any:
    """`image` with height and width swapped."""
    x = _image(image, "transpose")
    perm = [1, 0, 2] if x.shape.rank == 3 else [0, 2, 1, 3]
    return math_ops.transpose(x, perm)


def rot90(image: Any, k: int = 1, name: str | None = None) -> Any:
    """`image` rotated counter-clockwise by `k` quarter turns."""
    x = _image(image, "rot90")
    k = int(k) % 4
    if k == 1:
        return flip_up_down(transpose(x))
    if k == 2:
        return flip_up_down(flip_left_right(x))
    if k == 3:
        return transpose(flip_up_down(x))
    return x


def _box(x: Any, fn: str, top: int, left: int, height: int, width: int) -> Any:
    h, w = _hw(x, fn)
    if top < 0 or left < 0 or height <= 0 or width <= 0 or top + height > h or \
            left + width > w:
        raise ValueError(f"{fn}: the box (offset {top}, {left}, size {height}x{width}) does "
                         f"not lie inside the {h}x{w} image")
    lead = x.shape.rank - 3
    return array_ops.slice(x, [0] * lead + [top, left, 0],
                           [-1] * lead + [height, width, -1])


def crop_to_bounding_box(image: Any, offset_height: int, offset_width: int,
                         target_height: int, target_width: int) -> Any:
    """The `target_height` x `target_width` box of `image` at the offsets."""
    x = _image(image, "crop_to_bounding_box")
    return _box(x, "crop_to_bounding_box", int(offset_height), int(offset_width),
                int(target_height), int(target_width))


def pad_to_bounding_box(image: Any, offset_height: int, offset_width: int,
                        target_height: int, target_width: int) -> Any:
    """`image` placed at the offsets of a zero `target_height` x `target_width` image."""
    x = _image(image, "pad_to_bounding_box")
    h, w = _hw(x, "pad_to_bounding_box")
    top, left = int(offset_height), int(offset_width)
    bottom, right = int(target_height) - h - top, int(target_width) - w - left
    if min(top, left) < 0 or bottom < 0 or right < 0:
        raise ValueError(f"pad_to_bounding_box: a {h}x{w} image at offset ({top}, {left}) "
                         f"does not fit in {target_height}x{target_width}")
    pads = [[0, 0]] * (x.shape.rank - 3) + [[top, bottom], [left, right], [0, 0]]
    return array_ops.pad(x, pads)


def resize_with_crop_or_pad(image: Any, target_height: int, target_width: int) -> Any:
    """`image` centrally cropped or zero-padded to the target size."""
    x = _image(image, "resize_with_crop_or_pad")
    h, w = _hw(x, "resize_with_crop_or_pad")
    th, tw = int(target_height), int(target_width)
    if th <= 0 or tw <= 0:
        raise ValueError(f"resize_with_crop_or_pad: the target size must be positive, got "
                         f"{th}x{tw}")
    x = _box(x, "resize_with_crop_or_pad", max((h - th) // 2, 0), max((w - tw) // 2, 0),
             min(h, th), min(w, tw))
    ch, cw = min(h, th), min(w, tw)
    return pad_to_bounding_box(x, max((th - h) // 2, 0), max((tw - w) // 2, 0), th, tw) \
        if (ch, cw) != (th, tw) else x


def central_crop(image: Any, central_fraction: float) -> Any:
    """The central `central_fraction` (in (0, 1]) of `image`'s height and width."""
    x = _image(image, "central_crop")
    if not 0.0 < central_fraction <= 1.0:
        raise ValueError(f"central_crop: central_fraction must be within (0, 1], got "
                         f"{central_fraction}")
    if central_fraction == 1.0:
        return x
    h, w = _hw(x, "central_crop")
    top = int((h - h * central_fraction) / 2)
    left = int((w - w * central_fraction) / 2)
    return _box(x, "central_crop", top, left, h - 2 * top, w - 2 * left)


# ------------------------------------------------------------ colour
_GRAY = np.array([0.2989, 0.5870, 0.1140])


def rgb_to_grayscale(images: Any, name: str | None = None) -> Any:
    """The luma of RGB `images` (last axis 3), keeping a last axis of 1."""
    x = convert_to_tensor(images)
    if x.shape.rank is None or x.shape.rank < 1 or x.shape[-1] != 3:
        raise ValueError(f"rgb_to_grayscale: the last axis must hold 3 channels, got shape "
                         f"{x.shape}")
    f = convert_image_dtype(x, dtypes.float32) if not x.dtype.is_floating else x
    gray = math_ops.reduce_sum(f * convert_to_tensor(_GRAY, f.dtype), -1, keepdims=True)
    return convert_image_dtype(gray, x.dtype)


def grayscale_to_rgb(images: Any, name: str | None = None) -> Any:
    """Gray `images` (last axis 1) repeated into 3 channels."""
    x = convert_to_tensor(images)
    if x.shape.rank is None or x.shape.rank < 2 or x.shape[-1] != 1:
        raise ValueError(f"grayscale_to_rgb: the last axis must hold 1 channel, got shape "
                         f"{x.shape}")
    return array_ops.tile(x, [1] * (x.shape.rank - 1) + [3])


def _working(x: Any) -> Any:
    """`x` in the float type the colour functions compute in (float16 and
    float32 stay, everything else becomes float32 in [0, 1] units)."""
    return x if x.dtype in (dtypes.float16, dtypes.float32) else \
        convert_image_dtype(x, dtypes.float32)


def adjust_brightness(image: Any, delta: Any) -> Any:
    """`image` + `delta` (in [0, 1] units for integer images, saturating)."""
    x = convert_to_tensor(image)
    f = x if x.dtype.is_floating else convert_image_dtype(x, dtypes.float32)
    return convert_image_dtype(f + convert_to_tensor(delta, f.dtype), x.dtype, saturate=True)


def _contrast(x: Any, factor: Any) -> Any:
    mean = math_ops.reduce_mean(x, [x.shape.rank - 3, x.shape.rank - 2], keepdims=True)
    return (x - mean) * factor + mean


def adjust_contrast(images: Any, contrast_factor: Any) -> Any:
    """``(x - mean) * contrast_factor + mean`` per image and channel, the mean
    over height and width. As in TensorFlow it has no gradient: a gradient
    through it raises LookupError."""
    x = _image(images, "adjust_contrast")
    f = _working(x)
    out = _no_gradient("AdjustContrastv2", _contrast, f,
                       convert_to_tensor(contrast_factor, f.dtype))
    return convert_image_dtype(out, x.dtype, saturate=True)


def adjust_gamma(image: Any, gamma: float = 1, gain: float = 1) -> Any:
    """``gain * image ** gamma`` (integer images in [0, 1] units)."""
    x = convert_to_tensor(image)
    if float(gamma) < 0:
        raise ValueError(f"adjust_gamma: gamma must be non-negative, got {gamma}")
    f = _working(x)
    out = convert_to_tensor(gain, f.dtype) * f ** convert_to_tensor(gamma, f.dtype)
    return convert_image_dtype(out, x.dtype, saturate=True)


def per_image_standardization(image: Any) -> Any:
    """Each image scaled to mean 0 and variance 1 over all its pixels and
    channels: ``(x - mean) / max(stddev, 1 / sqrt(N))``; float32 for
    integer images."""
    x = _image(image, "per_image_standardization")
    f = x if x.dtype.is_floating else math_ops.cast(x, dtypes.float32)
    axes = [f.shape.rank - 3, f.shape.rank - 2, f.shape.rank - 1]
    n = int(np.prod([d for d in f.shape.as_list()[-3:]]))
    mean = math_ops.reduce_mean(f, axes, keepdims=True)
    var = math_ops.reduce_mean(math_ops.square(f), axes, keepdims=True) - math_ops.square(mean)
    std = math_ops.sqrt(math_ops.maximum(var, convert_to_tensor(0.0, f.dtype)))
    floor = convert_to_tensor(1.0 / math.sqrt(n), f.dtype)
    return (f - mean) / math_ops.maximum(std, floor)


def convert_image_dtype(image: Any, dtype: Any, saturate: bool = False,
                        name: str | None = None) -> Any:
    """`image` in `dtype`, values rescaled as TensorFlow does: integers span
    [0, MAX] of their type and floats [0, 1]."""
    x = convert_to_tensor(image)
    dtype = dtypes.as_dtype(dtype)
    if not (dtype.is_floating or dtype.is_integer) or not (x.dtype.is_floating or
                                                          x.dtype.is_integer):
        raise TypeError(f"convert_image_dtype: images are integer or floating, got "
                        f"{x.dtype.name} to {dtype.name}")
    if x.dtype == dtype:
        return x
    if x.dtype.is_integer and dtype.is_integer:
        src, dst = x.dtype.max, dtype.max
        if src > dst:
            return math_ops.cast(math_ops.floordiv(x, convert_to_tensor((src + 1) // (dst + 1),
                                                                        x.dtype)), dtype)
        return math_ops.cast(x, dtype) * convert_to_tensor((dst + 1) // (src + 1), dtype)
    if x.dtype.is_integer:   # to float: x / MAX
        return math_ops.cast(x, dtype) * convert_to_tensor(1.0 / x.dtype.max, dtype)
    if dtype.is_floating:
        return math_ops.cast(x, dtype)
    scaled = x * convert_to_tensor(dtype.max + 0.5, x.dtype)
    if saturate:
        scaled = array_ops.clip_by_value(scaled, float(dtype.min), float(dtype.max))
    return math_ops.cast(scaled, dtype)
