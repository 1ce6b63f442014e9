"""Checkpoints (``pg.train.Checkpoint``): save and restore every variable
reachable from a set of objects, exactly.

Objects are walked like TensorFlow's object graph: a ``Variable`` is saved;
a list or tuple is followed by index, a dict by key, any other object by
its attributes (``vars(obj)``, a ``pg.Module`` too), an optimizer by its
step counter and the slots of each variable. Each variable gets the
shortest path that reaches it (breadth first, as TensorFlow names it), e.g.
``model/layers/0/kernel``; ``list_variables`` gives these names with
TensorFlow's ``/.ATTRIBUTES/VARIABLE_VALUE`` suffix; an optimizer slot is saved under the
path of its variable: ``model/layers/0/kernel/.OPTIMIZER_SLOT/optimizer/m``.

Format (version 1): two files per checkpoint prefix.

- ``<prefix>.data``: the values, one after the other, each as its raw
  little-endian C-order bytes.
- ``<prefix>.index``: JSON ``{"format": "pluggable.checkpoint", "version":
  1, "data_file": "<name>.data", "data_size": <bytes>, "entries": {<path>:
  {"dtype": "float32", "shape": [..], "offset": <byte>, "size": <bytes>,
  "crc32": <zlib.crc32 of the bytes>}}}``.

``save`` also keeps a ``checkpoint`` file in the directory naming the latest
checkpoint (TensorFlow's text format: ``model_checkpoint_path: "ckpt-2"``),
read by ``latest_checkpoint``. Files are written to new files of random
names, created exclusively (never through a link planted there), and
renamed, so a crash never leaves a half-written checkpoint under the real
name.

Reading trusts nothing in the files: ``data_file`` must be a plain name in
the index's directory (no directory part, no ``..``) and a regular file, not
a symbolic link; every file is opened without blocking and checked to be a
regular file before it is read; the data file must hold exactly
``data_size`` bytes and nothing more is read; the index is at most 256 MiB.
``latest_checkpoint`` accepts only a plain name in its directory.

Errors: a missing file is ``NotFoundError``, a damaged one (bad index,
truncated data, checksum mismatch) ``DataLossError``, a value whose dtype or
shape does not match its variable ``InvalidArgumentError``; ``restore``
checks every value before it assigns any, so a failed restore changes
nothing.
"""
from __future__ import annotations

import errno
import json
import os
import re
import secrets
import stat
import types
import zlib
from typing import Any, Iterator

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..ops.variables import Variable
from ..runtime import placement
from .optimizers import Optimizer

FORMAT = "pluggable.checkpoint"
VERSION = 1
SLOT = ".OPTIMIZER_SLOT"
_STATE_FILE = "checkpoint"


# ------------------------------------------------------------- object graph

def _escape(key: Any) -> str:
    return str(key).replace("%", "%25").replace("/", "%2F")


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, Optimizer):
        yield "iterations", obj.iterations
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            yield _escape(k), obj[k]
    elif isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            yield str(i), x
    elif hasattr(obj, "__dict__") and not isinstance(obj, (type, types.ModuleType,
                                                           types.FunctionType, Tensor)):
        for k in sorted(vars(obj)):
            if not k.startswith("__"):
                yield _escape(k), vars(obj)[k]


def _walk(roots: dict) -> tuple[dict[str, Variable], list[tuple[str, Optimizer]]]:
    """Paths of the variables reachable from `roots` and of the optimizers.
    The walk is breadth first, as TensorFlow's object graph is: an object
    reached by several paths gets the shortest (the first in name order
    among equally short ones)."""
    found: dict[str, Variable] = {}
    optimizers: list[tuple[str, Optimizer]] = []
    seen: set[int] = set()
    level = [(roots[name], _escape(name)) for name in sorted(roots)]
    while level:
        following = []
        for obj, path in level:
            if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float,
                                                                   bool)):
                continue
            seen.add(id(obj))
            if isinstance(obj, Variable):
                found[path] = obj
                continue
            if isinstance(obj, Optimizer):
                optimizers.append((path, obj))
            following.extend((child, f"{path}/{name}") for name, child in _children(obj))
        level = following
    return found, optimizers


def _slot_key(var_path: str, opt_path: str, slot: str) -> str:
    return f"{var_path}/{SLOT}/{opt_path}/{slot}"


def _saveables(roots: dict) -> dict[str, Variable]:
    found, optimizers = _walk(roots)
    path_of = {id(v): p for p, v in found.items()}
    out = dict(found)
    for opt_path, opt in optimizers:
        for var, name, slot in opt._slot_items():
            if id(var) in path_of:
                out[_slot_key(path_of[id(var)], opt_path, name)] = slot
    return out


# ------------------------------------------------------------- files

_MAX_INDEX_BYTES = 256 << 20   # an index larger than this is refused unread
_MAX_STATE_BYTES = 1 << 20     # the same for the directory's `checkpoint` file


def _write_atomic(path: str, data: bytes) -> None:
    """Writes `data` to a new file of an unpredictable name, created
    exclusively (never through a link planted there), then renames it."""
    tmp = f"{path}.tmp{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o644)
    except OSError as exc:
        raise errors.PermissionDeniedError(
            f"cannot write checkpoint file {path}: {exc.strerror or exc} (check that the "
            "directory exists and is writable)") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _read_regular(path: str, limit: int, on_error, follow: bool = True) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them.

    Opened without blocking (a FIFO never hangs) and, unless `follow`,
    without following a symbolic link; what is not a regular file, or is
    larger than `limit`, is refused before anything is read. `on_error(why)`
    makes the error raised; a missing file is NotFoundError."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise errors.NotFoundError(f"{path} does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise on_error(f"{path} is a symbolic link; checkpoint files must be regular "
                           "files inside the checkpoint's directory") from None
        raise on_error(f"{path} cannot be opened ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise on_error(f"{path} is not a regular file")
        if st.st_size > limit:
            raise on_error(f"{path} holds {st.st_size} bytes, more than the {limit} "
                           "allowed")
        chunks, left = [], min(st.st_size, limit) + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise on_error(f"{path} grew past the {limit} bytes allowed while read")
        return data
    except OSError as exc:
        raise on_error(f"{path} cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def write_files(prefix: str, values: dict[str, np.ndarray]) -> None:
    """Writes `values` (path -> array) as checkpoint `prefix`."""
    entries, chunks, offset = {}, [], 0
    for key in sorted(values):
        a = np.asarray(values[key], order="C")
        raw = a.tobytes()
        entries[key] = {"dtype": dtypes.as_dtype(a.dtype).name, "shape": list(a.shape),
                        "offset": offset, "size": len(raw), "crc32": zlib.crc32(raw)}
        chunks.append(raw)
        offset += len(raw)
    directory = os.path.dirname(os.path.abspath(prefix))
    os.makedirs(directory, exist_ok=True)
    data_name = os.path.basename(prefix) + ".data"
    _write_atomic(prefix + ".data", b"".join(chunks))
    index = {"format": FORMAT, "version": VERSION, "data_file": data_name,
             "data_size": offset, "entries": entries}
    _write_atomic(prefix + ".index", json.dumps(index, indent=1, sort_keys=True).encode())


def _corrupt(prefix: str, why: str) -> errors.DataLossError:
    return errors.DataLossError(f"checkpoint {prefix} is damaged: {why}; it cannot be "
                                "restored (save it again, or restore an older checkpoint)")


def read_index(prefix: str) -> dict:
    """The parsed index of checkpoint `prefix`, validated."""
    path = prefix + ".index"
    try:
        raw = _read_regular(path, _MAX_INDEX_BYTES, lambda why: _corrupt(prefix, why))
    except errors.NotFoundError:
        raise errors.NotFoundError(
            f"checkpoint {prefix} not found: {path} does not exist (give the prefix "
            "that save() returned, e.g. 'ckpt/model-1', or pg.train.latest_checkpoint(dir))"
        ) from None
    try:
        index = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _corrupt(prefix, f"the index {path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise _corrupt(prefix, f"the index {path} nests too deeply to be a checkpoint "
                       "index") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise _corrupt(prefix, f"{path} is not a pluggable checkpoint index")
    if index.get("version") != VERSION:
        raise _corrupt(prefix, f"format version {index.get('version')!r} is not supported "
                       f"(this pluggable reads version {VERSION})")
    if not isinstance(index.get("entries"), dict):
        raise _corrupt(prefix, "the index has no entries table")
    size = index.get("data_size")
    if type(size) is not int or size < 0:
        raise _corrupt(prefix, f"the index gives the data size {size!r}; it must be a "
                       "count of bytes")
    _data_name(prefix, index)
    return index


def _data_name(prefix: str, index: dict) -> str:
    """The index's data file name: a plain name in the checkpoint's directory."""
    name = index.get("data_file")
    if not isinstance(name, str) or not _plain_name(name):
        raise _corrupt(prefix, f"the index names the data file {name!r}; it must be a "
                       "plain file name in the checkpoint's directory (no directory part, "
                       "no '..')")
    return name


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "\0" not in name and "/" not in name \
        and os.sep not in name and not (os.altsep and os.altsep in name)


def read_values(prefix: str, index: dict) -> dict[str, np.ndarray]:
    """Every value of checkpoint `prefix`, checked against its checksum."""
    data_path = os.path.join(os.path.dirname(os.path.abspath(prefix)),
                             _data_name(prefix, index))
    size = index.get("data_size")
    if type(size) is not int or size < 0:
        raise _corrupt(prefix, f"the index gives the data size {size!r}")
    try:
        data = _read_regular(data_path, size, lambda why: _corrupt(prefix, why), follow=False)
    except errors.NotFoundError:
        raise errors.NotFoundError(f"checkpoint {prefix}: its data file {data_path} does "
                                   "not exist (restore the .data file saved with the "
                                   "index, or save the checkpoint again)") from None
    if len(data) != size:
        raise _corrupt(prefix, f"the data file holds {len(data)} bytes, the index says "
                       f"{size}")
    out = {}
    for key, e in index["entries"].items():
        try:
            dt = dtypes.as_dtype(e["dtype"])
            shape = tuple(_count(d) for d in e["shape"])
            lo, size = _count(e["offset"]), _count(e["size"])
            crc = int(e["crc32"])
            count = 1
            for d in shape:
                count *= d
            expected = dt.size * count
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise _corrupt(prefix, f"entry {key!r} is malformed ({exc})") from None
        raw = data[lo:lo + size]
        if len(raw) != size or size != expected:
            raise _corrupt(prefix, f"entry {key!r} lies outside the data or has the wrong size")
        if zlib.crc32(raw) != crc:
            raise _corrupt(prefix, f"the value of {key!r} does not match its checksum")
        out[key] = np.frombuffer(raw, dt.as_numpy_dtype).reshape(shape).copy()
    return out


def _count(v: Any) -> int:
    """A non-negative integer of the index (bools and floats are refused)."""
    if type(v) is not int or v < 0:
        raise ValueError(f"{v!r} is not a count")
    return v


def _update_state_file(prefix: str, keep: list[str]) -> None:
    directory = os.path.dirname(os.path.abspath(prefix))
    lines = [f'model_checkpoint_path: "{os.path.basename(prefix)}"']
    lines += [f'all_model_checkpoint_paths: "{os.path.basename(p)}"' for p in keep]
    _write_atomic(os.path.join(directory, _STATE_FILE), ("\n".join(lines) + "\n").encode())


def latest_checkpoint(checkpoint_dir: str) -> str | None:
    """The prefix of the newest checkpoint ``save`` wrote in
    `checkpoint_dir`, or None if there is none. The name must be a plain
    name inside `checkpoint_dir`: a state file pointing elsewhere is a
    DataLossError."""
    path = os.path.join(checkpoint_dir, _STATE_FILE)

    def bad(why: str) -> errors.DataLossError:
        return errors.DataLossError(f"the checkpoint state file {path} is damaged: {why} "
                                    "(delete it, or save a checkpoint again to rewrite it)")
    try:
        raw = _read_regular(path, _MAX_STATE_BYTES, bad)
    except errors.NotFoundError:
        return None
    m = re.search(r'^model_checkpoint_path:\s*"([^"]*)"',
                  raw.decode("utf-8", errors="replace"), re.M)
    if not m:
        return None
    if not _plain_name(m.group(1)):
        raise bad(f"it names {m.group(1)!r}, which is not a plain name inside "
                  f"{checkpoint_dir}")
    prefix = os.path.join(checkpoint_dir, m.group(1))
    return prefix if os.path.isfile(prefix + ".index") else None


# ------------------------------------------------------------- Checkpoint

class LoadStatus:
    """What ``Checkpoint.restore`` matched (TensorFlow's load status)."""

    def __init__(self, prefix: str, unused: list[str], missing: list[str]):
        self._prefix, self._unused, self._missing = prefix, unused, missing

    def assert_consumed(self) -> "LoadStatus":
        """Raises AssertionError unless every value of the checkpoint was
        restored into a variable and every variable got a value."""
        if self._unused or self._missing:
            raise AssertionError(
                f"checkpoint {self._prefix}: values with no variable: {self._unused or 'none'}; "
                f"variables with no value: {self._missing or 'none'}")
        return self

    def assert_existing_objects_matched(self) -> "LoadStatus":
        """Raises AssertionError unless every variable got a value."""
        if self._missing:
            raise AssertionError(f"checkpoint {self._prefix}: variables with no value: "
                                 f"{self._missing}")
        return self

    def expect_partial(self) -> "LoadStatus":
        """Accepts values with no variable (nothing to do)."""
        return self


_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def _prefix_of(ckpt_dir_or_file: str) -> str:
    if os.path.isdir(ckpt_dir_or_file):
        found = latest_checkpoint(ckpt_dir_or_file)
        if found is None:
            raise errors.NotFoundError(f"no checkpoint in directory {ckpt_dir_or_file} (its "
                                       "'checkpoint' file names none)")
        return found
    return ckpt_dir_or_file


def list_variables(ckpt_dir_or_file: str) -> list[tuple[str, list[int]]]:
    """(name, shape) of every value in a checkpoint (a prefix, or a directory:
    its latest), sorted by name. Names are TensorFlow's object-graph keys
    (``model/layers/0/w/.ATTRIBUTES/VARIABLE_VALUE``), so they match what
    ``tf.train.list_variables`` gives for the same objects (TensorFlow's
    extra ``_CHECKPOINTABLE_OBJECT_GRAPH`` entry aside)."""
    index = read_index(_prefix_of(ckpt_dir_or_file))
    return sorted((k + _VALUE_SUFFIX, list(e["shape"])) for k, e in index["entries"].items())


def load_variable(ckpt_dir_or_file: str, name: str) -> np.ndarray:
    """The value saved under `name` (as ``list_variables`` names it)."""
    prefix = _prefix_of(ckpt_dir_or_file)
    values = read_values(prefix, read_index(prefix))
    key = name[:-len(_VALUE_SUFFIX)] if name.endswith(_VALUE_SUFFIX) else name
    if key not in values:
        raise errors.NotFoundError(f"checkpoint {prefix} holds no value named {name!r}; "
                                   "pg.train.list_variables lists its names")
    return values[key]


class Checkpoint:
    """Saves and restores the variables of the objects it is given::

        ckpt = pg.train.Checkpoint(model=model, optimizer=opt)
        path = ckpt.save("ckpts/run")          # "ckpts/run-1"
        ckpt.restore(path)                     # or pg.train.latest_checkpoint("ckpts")

    Any nesting of objects, lists and dicts holding variables works. A
    restore into an optimizer that has not made its slots yet makes them."""

    def __init__(self, **kwargs: Any):
        if not kwargs:
            raise ValueError("Checkpoint needs the objects to save as keyword arguments, "
                             "e.g. Checkpoint(model=model, optimizer=optimizer)")
        if "save_counter" in kwargs:
            raise ValueError("'save_counter' is reserved by Checkpoint")
        self._roots = dict(kwargs)
        self._save_counter: Variable | None = None  # made by the first save (or read)
        self._saved: list[str] = []

    def __getattr__(self, name: str) -> Any:
        roots = self.__dict__.get("_roots", {})
        if name in roots:
            return roots[name]
        raise AttributeError(name)

    @property
    def save_counter(self) -> Variable:
        """How many times ``save`` ran (saved in the checkpoint too). As in
        TensorFlow it exists from the first ``save`` or read of it on, so a
        checkpoint only ever ``write``-n holds no counter."""
        if self._save_counter is None:
            with placement.device("CPU:0"):
                self._save_counter = Variable(np.int64(0), trainable=False, name="save_counter")
        return self._save_counter

    def _all_roots(self) -> dict:
        if self._save_counter is None:
            return dict(self._roots)
        return {**self._roots, "save_counter": self._save_counter}

    def write(self, file_prefix: str) -> str:
        """Writes the checkpoint exactly at `file_prefix` (no counter);
        returns it."""
        values = {k: np.asarray(v) for k, v in _saveables(self._all_roots()).items()}
        write_files(file_prefix, values)
        return file_prefix

    def save(self, file_prefix: str) -> str:
        """Writes the checkpoint at ``f"{file_prefix}-{n}"`` (n counts the
        saves), records it as the latest in the directory's ``checkpoint``
        file, and returns that path."""
        self.save_counter.assign_add(np.int64(1))
        path = f"{file_prefix}-{int(self._save_counter.numpy())}"
        self.write(path)
        self._saved.append(path)
        _update_state_file(path, self._saved)
        return path

    def restore(self, save_path: str) -> LoadStatus:
        """Restores every variable found in the checkpoint at `save_path`.
        Every value is checked first; on any error nothing is assigned."""
        if save_path is None:
            raise errors.NotFoundError("Checkpoint.restore: no checkpoint path given (did "
                                       "pg.train.latest_checkpoint find none?)")
        index = read_index(save_path)
        values = read_values(save_path, index)
        if any(k.startswith("save_counter") for k in values):
            self.save_counter  # noqa: B018  (made, to restore the saved count into)
        targets = self._restore_targets(values)
        self._check(save_path, values, targets)
        for key, var in targets.items():
            var.assign(values[key])
        missing = sorted(k for k in _saveables(self._all_roots()) if k not in values)
        return LoadStatus(save_path, sorted(set(values) - set(targets)), missing)

    read = restore

    def _restore_targets(self, values: dict) -> dict[str, Variable]:
        """Variables to restore, by checkpoint path; optimizer slots named in
        the checkpoint are created where they do not exist yet."""
        found, optimizers = _walk(self._all_roots())
        targets = {k: v for k, v in found.items() if k in values}
        for opt_path, opt in optimizers:
            for var_path, var in found.items():
                for name in opt._slot_names:
                    key = _slot_key(var_path, opt_path, name)
                    if key in values:
                        targets[key] = opt._ensure_slots(var)[name]
        return targets

    @staticmethod
    def _check(prefix: str, values: dict, targets: dict) -> None:
        bad = []
        for key, var in targets.items():
            a = values[key]
            if dtypes.as_dtype(a.dtype) is not var.dtype or tuple(a.shape) != tuple(var.shape):
                bad.append(f"{key}: the checkpoint holds {dtypes.as_dtype(a.dtype).name} "
                           f"{list(a.shape)}, the variable is {var.dtype.name} {list(var.shape)}")
        if bad:
            raise errors.InvalidArgumentError(
                f"checkpoint {prefix} does not fit the objects (nothing was restored): "
                + "; ".join(bad))
