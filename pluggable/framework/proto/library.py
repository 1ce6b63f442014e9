"""The generated ``*_pb2`` modules of our ``.proto`` files, imported on
first use.

setup.py compiles the files with protoc at build time and points the
modules at a private descriptor pool (``_pool.POOL``), never protobuf's
default pool, so TensorFlow's generated classes for the same message names
can live in the same process.
"""
from __future__ import annotations

import hashlib
import importlib
import pathlib
import threading
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

from .. import errors

if TYPE_CHECKING:  # pragma: no cover
    from google.protobuf.descriptor_pool import DescriptorPool
    from google.protobuf.message import Message

PROTO_DIR = pathlib.Path(__file__).resolve().parent
_REBUILD = ("rebuild the package (pip install, or python3 setup.py build_ext --inplace "
            "in a source checkout), which runs protoc")

_lock = threading.Lock()
_loaded: tuple[DescriptorPool, Messages] | None = None


class Messages(SimpleNamespace):
    """The message classes and enums of our ``.proto`` files, by short name
    (``GraphDef``, ``NodeDef``, ``XSpace``, ``DataType`` ...).  Message
    attributes are classes (call them to make a message); enum attributes are
    ``EnumTypeWrapper``s (``DataType.DT_FLOAT``, ``DataType.Name(1)``)."""

    def __repr__(self) -> str:
        return f"Messages({', '.join(sorted(vars(self)))})"


def proto_sources() -> dict[str, str]:
    """The texts of the ``.proto`` files that ship with the package, by name."""
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(PROTO_DIR.glob("*.proto"))}


def generated_module(proto_file: str) -> ModuleType:
    """The ``*_pb2`` module generated from ``proto_file`` (``"graph.proto"``).

    Raises ``FailedPreconditionError`` when the module is missing (a source
    checkout that was not built), was made from another version of the
    ``.proto`` text, or needs a newer protobuf than the one installed."""
    from google.protobuf import __version__ as runtime
    from google.protobuf.runtime_version import VersionError

    stem = pathlib.Path(proto_file).stem
    name = f"{stem}_pb2.py"
    try:
        module = importlib.import_module(f"{__package__}.{stem}_pb2")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.{stem}_pb2":
            raise
        raise errors.FailedPreconditionError(
            f"{name}, the classes of {proto_file}, is missing from {PROTO_DIR}; "
            f"{_REBUILD}") from None
    except VersionError as exc:
        raise errors.FailedPreconditionError(
            f"{name} in {PROTO_DIR} was generated for another protobuf than the installed "
            f"{runtime} ({exc}); install a protobuf that accepts it, or {_REBUILD} with "
            "a grpcio-tools whose protobuf requirement the installed one meets") from None
    source = PROTO_DIR / proto_file
    if hashlib.sha256(source.read_bytes()).hexdigest() != getattr(module, "SOURCE_SHA256", ""):
        raise errors.FailedPreconditionError(
            f"{name} in {PROTO_DIR} was generated from another version of {proto_file}; "
            f"{_REBUILD}")
    return module


def _load() -> tuple[DescriptorPool, Messages]:
    from . import _pool

    found: dict[str, Any] = {}
    for proto_file in proto_sources():
        module = generated_module(proto_file)
        file = module.DESCRIPTOR
        for name in [*file.message_types_by_name, *file.enum_types_by_name]:
            if name in found:  # a short name used in two packages
                raise errors.InternalError(f"two .proto files define {name!r}; give one "
                                           "of them another name")
            found[name] = getattr(module, name)
    return _pool.POOL, Messages(**found)


def _state() -> tuple[DescriptorPool, Messages]:
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _load()
    return _loaded


def messages() -> Messages:
    """The message classes and enums, imported from the generated modules on
    the first call and cached for the life of the process (thread-safe)."""
    return _state()[1]


def pool() -> DescriptorPool:
    """The private ``DescriptorPool`` that holds our files (``graph.proto``,
    ``xplane.proto`` ...), for code that needs descriptors by full name."""
    return _state()[0]


def decode(message_type: type[Message], data: bytes, *, source: str | None = None,
           strict: bool = False) -> Message:
    """Parses serialised bytes into a new ``message_type`` message.

    ``source`` (a file name, a plugin) is named in the error.  Malformed data
    raises ``pluggable.errors.DataLossError`` instead of protobuf's
    ``DecodeError``; data that is not bytes raises ``InvalidArgumentError``.
    With ``strict=True``, fields this version does not know are refused too
    (random bytes often decode as nothing but unknown fields); leave it off
    for data from newer writers, which may add fields.
    """
    from google.protobuf.message import DecodeError

    name = message_type.DESCRIPTOR.name
    where = f" from {source}" if source else ""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise errors.InvalidArgumentError(
            f"cannot parse a {name}{where}: expected bytes, got {type(data).__name__}")
    msg = message_type()
    try:
        msg.ParseFromString(bytes(data))
    except DecodeError as exc:
        raise errors.DataLossError(
            f"cannot parse a {name}{where} ({len(data)} bytes): {exc or 'malformed data'}; "
            f"the data is truncated, corrupt, or not a serialised {name}") from None
    if strict:
        size = msg.ByteSize()
        msg.DiscardUnknownFields()
        if msg.ByteSize() != size:
            raise errors.DataLossError(
                f"cannot parse a {name}{where} ({len(data)} bytes): it holds fields a "
                f"{name} does not have, so it is corrupt or not a serialised {name}")
    return msg


def encode(message: Message) -> bytes:
    """Serialises a message deterministically (map entries in key order), so
    the same message always gives the same bytes."""
    return message.SerializeToString(deterministic=True)
