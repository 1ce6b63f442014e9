"""``pg.TensorArray``: a list of tensors that loops can write (``tf.TensorArray``).

Eagerly it holds a Python list of tensors. Inside a traced function it is
one dense tensor of shape ``[size] + element_shape`` (the *buffer*):
``write`` selects the new element into row ``index`` (op ``SelectV2``),
``read`` gathers a row, ``stack`` is the buffer itself. Operations return
a new TensorArray (use the returned one, as in TensorFlow); ``pg.while_loop``
carries a TensorArray among its loop variables through its buffer.

The buffer needs the element shape before the first write: it is taken
from ``element_shape``, from a write made before a loop, or, for an array
that enters a ``pg.while_loop`` unwritten, from the body's first write
(the body is traced once more to find it). With ``dynamic_size=True`` a
write past the end grows the buffer (its first dimension is then unknown
inside loops).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..ops import array_ops, math_ops, raw_ops
from ..runtime.tensors import convert_to_tensor
from . import py_function, tracing


def _static_int(x: Any, what: str) -> int | None:
    """`x` as a Python int when its value is known now, else None."""
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, tracing.SymbolicTensor):
        v = tracing.const_value(x)
        return None if v is None else int(v)
    if isinstance(x, Tensor):
        return int(x.numpy())
    raise TypeError(f"TensorArray: {what} must be an int or an int tensor, got {x!r}")


class TensorArray:
    """A list of tensors of one dtype and element shape, written and read
    by index: ``write(i, value)``, ``read(i)``, ``stack()``,
    ``unstack(value)``, ``size()``, ``gather(indices)``, ``concat()``."""

    def __init__(self, dtype: Any, size: Any = None, dynamic_size: bool | None = None,
                 clear_after_read: bool | None = None, tensor_array_name: str | None = None,
                 handle: Any = None, flow: Any = None, infer_shape: bool = True,
                 element_shape: Sequence[int | None] | None = None,
                 colocate_with_first_write_call: bool = True, name: str | None = None):
        self.dtype = dtypes.as_dtype(dtype)
        self.dynamic_size = bool(dynamic_size)
        self._infer_shape = infer_shape
        self._element_shape = None if element_shape is None else tuple(
            None if d is None or d == -1 else int(d) for d in element_shape)
        self._graph = tracing.current_graph() is not None
        self._items: list | None = None    # eager: the elements (None: not written)
        self._buffer: Tensor | None = None  # traced: [size] + element_shape
        self._size_value: Any = 0 if size is None else size
        if size is None and not self.dynamic_size:
            raise errors.InvalidArgumentError(
                "TensorArray: give a size, or dynamic_size=True for an array that grows")
        if not self._graph:
            self._items = [None] * _static_int(self._size_value, "size")
        elif self._element_shape is not None and None not in self._element_shape:
            self._make_buffer(self._element_shape)

    # ------------------------------------------------------------ internals
    def _copy(self) -> "TensorArray":
        out = object.__new__(TensorArray)
        out.__dict__.update(self.__dict__)
        if self._items is not None:
            out._items = list(self._items)
        return out

    def _make_buffer(self, shape: tuple) -> None:
        n = _static_int(self._size_value, "size")
        if n is None:
            raise errors.InvalidArgumentError(
                "TensorArray: inside a pg.function the size must be known when the array "
                "is made (a Python int or a constant); use dynamic_size=True to grow it")
        self._element_shape = tuple(shape)
        self._buffer = array_ops.zeros((n,) + tuple(shape), self.dtype)

    def _check_value(self, value: Any, what: str) -> Tensor:
        v = value if isinstance(value, Tensor) else convert_to_tensor(value, self.dtype)
        if v.dtype is not self.dtype:
            raise errors.InvalidArgumentError(
                f"TensorArray {what}: the array holds {self.dtype.name} but the value is "
                f"{v.dtype.name}; cast it (pg.cast)")
        want = self._element_shape
        if want is not None and self._infer_shape and v.shape is not None and (
                len(want) != len(v.shape) or any(a is not None and b is not None and a != b
                                                 for a, b in zip(want, v.shape))):
            raise errors.InvalidArgumentError(
                f"TensorArray {what}: the value has shape {list(v.shape)} but the "
                f"array's elements have shape {list(want)}")
        return v

    def _eager_index(self, index: Any, what: str, writing: bool) -> int:
        i = _static_int(index, "index")
        n = len(self._items)
        if i < 0 or (i >= n and not (writing and self.dynamic_size)):
            cls = errors.OutOfRangeError if writing else errors.InvalidArgumentError
            raise cls(f"TensorArray {what}: tried to {what} index {i} but the array is "
                      f"not resizeable and its size is {n}" if writing else
                      f"TensorArray read: index {i} is out of range for an array of size {n}")
        return i

    # ------------------------------------------------------------ API
    @property
    def element_shape(self) -> tuple | None:
        return self._element_shape

    def size(self, name: str | None = None) -> Tensor:
        """The number of elements (an int32 scalar)."""
        if self._items is not None:
            return convert_to_tensor(np.int32(len(self._items)))
        if self._buffer is None:
            return convert_to_tensor(np.int32(_static_int(self._size_value, "size")))
        return math_ops.cast(array_ops.shape(self._buffer)[0], dtypes.int32)

    def write(self, index: Any, value: Any, name: str | None = None) -> "TensorArray":
        """A TensorArray with `value` at `index`."""
        v = self._check_value(value, "write")
        out = self._copy()
        if out._element_shape is None and self._infer_shape:
            out._element_shape = tuple(v.shape)
        if out._items is not None:
            i = out._eager_index(index, "write", True)
            if i >= len(out._items):
                out._items.extend([None] * (i + 1 - len(out._items)))
            out._items[i] = v
            return out
        if out._buffer is None:
            out._make_buffer(tuple(v.shape))
        buf = out._buffer
        index = convert_to_tensor(index, dtypes.int32) if not isinstance(index, Tensor) \
            else math_ops.cast(index, dtypes.int32)
        if self.dynamic_size:
            n = array_ops.shape(buf, out_type=dtypes.int32)[0]
            grow = math_ops.maximum(index + 1 - n, 0)
            rest = np.zeros((len(v.shape), 2), np.int32)
            first = math_ops.reshape(array_ops.stack([np.int32(0), grow]), [1, 2])
            buf = raw_ops.Pad(input=buf, paddings=array_ops.concat([first, rest], 0))
        rows = buf.shape[0] if buf.shape is not None and buf.shape[0] is not None else \
            array_ops.shape(buf, out_type=dtypes.int32)[0]
        positions = raw_ops.Range(start=np.int32(0), limit=np.int32(rows) if isinstance(rows, int)
                                  else rows, delta=np.int32(1))
        mask = math_ops.equal(positions, index)
        mask = math_ops.reshape(mask, [-1] + [1] * len(v.shape))
        new = array_ops.where(mask, array_ops.expand_dims(v, 0), buf)
        if self.dynamic_size:  # the element shape is known, whatever the size
            py_function.set_static_shape(new, (None,) + tuple(v.shape))
        out._buffer = new
        return out

    def read(self, index: Any, name: str | None = None) -> Tensor:
        """The element at `index`."""
        if self._items is not None:
            i = self._eager_index(index, "read", False)
            v = self._items[i]
            if v is None:
                if self._element_shape is None or None in self._element_shape:
                    raise errors.InvalidArgumentError(
                        f"TensorArray read: index {i} has not been written and the "
                        "element shape is unknown, so it has no value; write it first")
                return array_ops.zeros(self._element_shape, self.dtype)
            return v
        if self._buffer is None:
            raise errors.InvalidArgumentError(
                "TensorArray read: the array has not been written and its element shape is "
                "unknown; write it first or give element_shape")
        return array_ops.gather(self._buffer, index)

    def gather(self, indices: Any, name: str | None = None) -> Tensor:
        """The elements at `indices`, stacked."""
        return array_ops.gather(self.stack(), indices)

    def stack(self, name: str | None = None) -> Tensor:
        """Every element, stacked along a new first axis."""
        if self._items is not None:
            if not self._items:
                shape = (0,) + tuple(d or 0 for d in (self._element_shape or ()))
                return array_ops.zeros(shape, self.dtype)
            return array_ops.stack([self.read(i) for i in range(len(self._items))])
        if self._buffer is None:
            if self._element_shape is not None and None not in self._element_shape:
                self._make_buffer(self._element_shape)
                return self._buffer
            raise errors.InvalidArgumentError(
                "TensorArray stack: the array has not been written and its element shape "
                "is unknown; write it first or give element_shape")
        return self._buffer

    def concat(self, name: str | None = None) -> Tensor:
        """Every element, joined along their first axis."""
        if self._items is not None:
            return array_ops.concat([self.read(i) for i in range(len(self._items))], 0)
        s = self.stack()
        shape = array_ops.shape(s, out_type=dtypes.int32)
        return math_ops.reshape(s, array_ops.concat([[-1], shape[2:]], 0))

    def unstack(self, value: Any, name: str | None = None) -> "TensorArray":
        """A TensorArray whose elements are the rows of `value`."""
        v = value if isinstance(value, Tensor) else convert_to_tensor(value, self.dtype)
        if v.dtype is not self.dtype:
            raise errors.InvalidArgumentError(
                f"TensorArray unstack: the array holds {self.dtype.name} but the value is "
                f"{v.dtype.name}")
        out = self._copy()
        if v.shape is not None and len(v.shape) >= 1:
            out._element_shape = tuple(v.shape[1:])
        if out._items is not None:
            out._items = [v[i] for i in range(v.shape[0])]
        else:
            out._buffer = v
        return out

    def scatter(self, indices: Any, value: Any, name: str | None = None) -> "TensorArray":
        """A TensorArray with the rows of `value` at `indices`."""
        idx = indices.numpy() if isinstance(indices, Tensor) and self._items is not None \
            else indices
        out = self
        for j, i in enumerate(np.asarray(idx).reshape(-1)):
            out = out.write(int(i), value[j])
        return out

    def close(self, name: str | None = None) -> None:
        """Nothing to release (kept for compatibility)."""

    def __repr__(self) -> str:
        return f"<pg.TensorArray dtype={self.dtype.name} element_shape={self._element_shape}>"


# ------------------------------------------------------------ loop support

def buffer_shape(ta: TensorArray) -> tuple | None:
    """The loop-invariant shape of `ta`'s buffer."""
    if ta._buffer is None:
        return None
    shape = tuple(ta._buffer.shape)
    return ((None,) + shape[1:]) if ta.dynamic_size else shape


def with_buffer(ta: TensorArray, buffer: Tensor) -> TensorArray:
    """`ta` holding `buffer` (a loop variable's value inside or after a loop)."""
    out = ta._copy()
    out._items = None
    out._buffer = buffer
    return out
