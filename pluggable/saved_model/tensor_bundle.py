"""TensorFlow's TensorBundle checkpoints: ``<prefix>.index`` and
``<prefix>.data-00000-of-00001``.

The data file holds the values one after the other: a numeric tensor as
its little-endian C-order bytes; a string tensor as the varint64 length
of each element, a fixed32 masked CRC32C of those lengths (each taken as
a little-endian uint32), then the bytes of every element.

The index is an SSTable (the LevelDB table layout): data blocks of
prefix-compressed ``key -> value`` records with restart points, each block
followed by a compression byte and a masked CRC32C of the block and that
byte; an empty meta-index block; an index block mapping the last key of
each data block to its (offset, size); and a 48-byte footer of the two
block handles, padding and the magic number. The value of the empty key is
a ``BundleHeaderProto``; every other key names a tensor and its value is
its ``BundleEntryProto`` (dtype, shape, shard, offset, size and the masked
CRC32C of its bytes).

Only one shard and uncompressed blocks are written and read. Reading
trusts nothing: every length, offset and checksum is checked, and a
damaged file is a ``DataLossError`` naming it.
"""
from __future__ import annotations

import struct

import numpy as np

from ..framework import dtypes, errors, proto

MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_SIZE = 1 << 18           # data block size before a new block starts
RESTART_INTERVAL = 16
HEADER_KEY = b""
VERSION = 1                    # the TensorBundle format version written and read
DATA_SUFFIX = ".data-00000-of-00001"

# ------------------------------------------------------------------ CRC32C


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC32C (Castagnoli) of `data`, extending `crc`."""
    c = crc ^ 0xFFFFFFFF
    table = _TABLE
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def mask(crc: int) -> int:
    """The masked form of a CRC stored next to the data it covers."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# ------------------------------------------------------------------ varints

def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    n = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise errors.DataLossError(f"{where}: a length runs past its block")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7


# ------------------------------------------------------------------ SSTable

def _block(records: list[tuple[bytes, bytes]], interval: int) -> bytes:
    out, restarts, last = bytearray(), [], b""
    for i, (key, value) in enumerate(records):
        shared = 0
        if i % interval == 0:
            restarts.append(len(out))
        else:
            limit = min(len(key), len(last))
            while shared < limit and key[shared] == last[shared]:
                shared += 1
        out += _varint(shared) + _varint(len(key) - shared) + _varint(len(value))
        out += key[shared:] + value
        last = key
    if not restarts:
        restarts.append(0)
    out += b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))
    return bytes(out)


def write_table(records: list[tuple[bytes, bytes]]) -> bytes:
    """An SSTable of `records` (sorted by key, no key twice)."""
    out = bytearray()
    index: list[tuple[bytes, bytes]] = []

    def emit(contents: bytes) -> bytes:
        handle = _varint(len(out)) + _varint(len(contents))
        out.extend(contents + b"\0" + struct.pack("<I", mask(crc32c(contents + b"\0"))))
        return handle

    pending, size = [], 0
    for key, value in records:
        pending.append((key, value))
        size += len(key) + len(value) + 8
        if size >= BLOCK_SIZE:
            index.append((key, emit(_block(pending, RESTART_INTERVAL))))
            pending, size = [], 0
    if pending or not index:
        index.append((pending[-1][0] if pending else b"",
                      emit(_block(pending, RESTART_INTERVAL))))
    meta = emit(_block([], 1))
    idx = emit(_block(index, 1))
    footer = (meta + idx).ljust(FOOTER_SIZE - 8, b"\0") + struct.pack("<Q", MAGIC)
    return bytes(out + footer)


def _handle(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int, int]:
    offset, pos = _read_varint(buf, pos, end, where)
    size, pos = _read_varint(buf, pos, end, where)
    return offset, size, pos


def _read_block(data: bytes, offset: int, size: int, where: str) -> bytes:
    if offset + size + 5 > len(data) - FOOTER_SIZE or size < 4:
        raise errors.DataLossError(f"{where}: a block lies outside the file")
    contents = data[offset:offset + size]
    kind = data[offset + size]
    (stored,) = struct.unpack_from("<I", data, offset + size + 1)
    if mask(crc32c(contents + bytes([kind]))) != stored:
        raise errors.DataLossError(f"{where}: a block's checksum does not match its bytes "
                                   "(the file is damaged)")
    if kind != 0:
        raise errors.UnimplementedError(
            f"{where}: a block is compressed (type {kind}); pluggable reads uncompressed "
            "TensorBundle indexes, as TensorFlow writes them")
    return contents


def _records(block: bytes, where: str) -> list[tuple[bytes, bytes]]:
    if len(block) < 4:
        raise errors.DataLossError(f"{where}: a block is too short")
    (count,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 - 4 * count
    if count == 0 or end < 0:
        raise errors.DataLossError(f"{where}: a block's restart table is damaged")
    out, pos, last = [], 0, b""
    while pos < end:
        shared, pos = _read_varint(block, pos, end, where)
        own, pos = _read_varint(block, pos, end, where)
        vlen, pos = _read_varint(block, pos, end, where)
        if shared > len(last) or pos + own + vlen > end:
            raise errors.DataLossError(f"{where}: a record runs past its block")
        key = last[:shared] + block[pos:pos + own]
        pos += own
        out.append((key, block[pos:pos + vlen]))
        pos += vlen
        last = key
    return out


def read_table(data: bytes, where: str) -> list[tuple[bytes, bytes]]:
    """The records of SSTable `data` (`where` names the file in errors)."""
    if len(data) < FOOTER_SIZE:
        raise errors.DataLossError(f"{where} is truncated: {len(data)} bytes, shorter "
                                   "than a table footer")
    foot = len(data) - FOOTER_SIZE
    if struct.unpack_from("<Q", data, len(data) - 8)[0] != MAGIC:
        raise errors.DataLossError(f"{where} is not a TensorBundle index (no SSTable magic "
                                   "number at its end; the file is truncated or damaged)")
    _, _, pos = _handle(data, foot, len(data) - 8, where)
    offset, size, _ = _handle(data, pos, len(data) - 8, where)
    out = []
    for _, value in _records(_read_block(data, offset, size, where), where):
        b_off, b_size, _ = _handle(value, 0, len(value), where)
        out.extend(_records(_read_block(data, b_off, b_size, where), where))
    keys = [k for k, _ in out]
    if keys != sorted(set(keys)):
        raise errors.DataLossError(f"{where}: its keys are not sorted or repeat")
    return out


# ------------------------------------------------------------------ tensors

def _length_crc(n: int, crc: int) -> int:
    return crc32c(struct.pack("<I", n) if n <= 0xFFFFFFFF else struct.pack("<Q", n), crc)


def _string_bytes(values: list[bytes]) -> tuple[bytes, int]:
    """The bytes of a string tensor and their checksum (over the lengths as
    integers, the stored checksum of the lengths and the elements)."""
    crc = 0
    for v in values:
        crc = _length_crc(len(v), crc)
    stored = struct.pack("<I", mask(crc))
    crc = crc32c(stored, crc)
    for v in values:
        crc = crc32c(v, crc)
    return b"".join(_varint(len(v)) for v in values) + stored + b"".join(values), crc


def _string_values(raw: bytes, count: int, stored_crc: int, key: str,
                   where: str) -> np.ndarray:
    pos, lengths, crc = 0, [], 0
    for _ in range(count):
        n, pos = _read_varint(raw, pos, len(raw), where)
        lengths.append(n)
        crc = _length_crc(n, crc)
    if pos + 4 > len(raw) or struct.unpack_from("<I", raw, pos)[0] != mask(crc):
        raise errors.DataLossError(f"{where}: the lengths of string tensor {key!r} are "
                                   "damaged")
    crc = crc32c(raw[pos:pos + 4], crc)
    pos += 4
    out = np.empty(count, object)
    for i, n in enumerate(lengths):
        if pos + n > len(raw):
            raise errors.DataLossError(f"{where}: string tensor {key!r} runs past its bytes")
        out[i] = raw[pos:pos + n]
        crc = crc32c(out[i], crc)
        pos += n
    if pos != len(raw) or mask(crc) != stored_crc:
        raise errors.DataLossError(f"{where}: the checksum of {key!r} does not match its "
                                   "bytes (the data file is damaged)")
    return out


def write_bundle(values: dict[str, np.ndarray]) -> tuple[bytes, bytes]:
    """(index bytes, data bytes) of a bundle holding `values` (key -> array;
    an object array of bytes is a string tensor)."""
    m = proto.messages()
    header = m.BundleHeaderProto(num_shards=1, endianness=m.BundleHeaderProto.LITTLE)
    header.version.producer = VERSION
    records = [(HEADER_KEY, proto.encode(header))]
    data, offset = [], 0
    for key in sorted(values):
        a = np.asarray(values[key])
        if a.dtype == object:
            raw, crc = _string_bytes([bytes(v) for v in a.reshape(-1)])
            dt = m.DataType.DT_STRING
        else:
            a = np.asarray(a, a.dtype.newbyteorder("<"), order="C")
            raw = a.tobytes()
            crc = crc32c(raw)
            dt = proto.to_datatype(dtypes.as_dtype(a.dtype))
        entry = m.BundleEntryProto(dtype=dt, shard_id=0, offset=offset, size=len(raw),
                                   crc32c=mask(crc))
        entry.shape.CopyFrom(proto.to_shape_proto(tuple(a.shape)))
        records.append((key.encode(), proto.encode(entry)))
        data.append(raw)
        offset += len(raw)
    return write_table(records), b"".join(data)


def read_entries(index: bytes, where: str) -> dict[str, object]:
    """Key -> ``BundleEntryProto`` of bundle index `index`, once its header
    is checked (one shard, little-endian, a version this code reads)."""
    m = proto.messages()
    records = read_table(index, where)
    if not records or records[0][0] != HEADER_KEY:
        raise errors.DataLossError(f"{where} has no bundle header (its first key must be "
                                   "empty)")
    header = proto.decode(m.BundleHeaderProto, records[0][1], source=where)
    if header.version.min_consumer > VERSION or VERSION in header.version.bad_consumers:
        raise errors.UnimplementedError(
            f"{where} needs a TensorBundle reader of version {header.version.min_consumer} "
            f"or later; pluggable reads version {VERSION} (save it with an older writer)")
    if header.endianness != m.BundleHeaderProto.LITTLE or header.num_shards != 1:
        raise errors.UnimplementedError(
            f"{where}: pluggable reads little-endian bundles of one shard; this one has "
            f"{header.num_shards} shards, endianness {header.endianness}")
    out = {}
    for key, value in records[1:]:
        try:
            name = key.decode()
        except UnicodeDecodeError:
            raise errors.DataLossError(f"{where}: a key is not UTF-8 text") from None
        out[name] = proto.decode(m.BundleEntryProto, value, source=f"{where} ({name})")
    return out


def read_value(entry, data: bytes, key: str, where: str) -> np.ndarray:
    """The array `entry` describes in data file `data`, checked against its
    size and checksum."""
    if entry.slices:
        raise errors.UnimplementedError(f"{where}: {key!r} is saved in slices, which "
                                        "pluggable does not read")
    if entry.shard_id != 0:
        raise errors.DataLossError(f"{where}: {key!r} names shard {entry.shard_id} of a "
                                   "bundle of one shard")
    shape = proto.from_shape_proto(entry.shape)
    if shape is None or any(d is None for d in shape):
        raise errors.DataLossError(f"{where}: {key!r} has no full shape")
    start, size = int(entry.offset), int(entry.size)
    if start < 0 or size < 0 or start + size > len(data):
        raise errors.DataLossError(
            f"{where}: {key!r} lies at bytes {start}..{start + size} of a data file of "
            f"{len(data)} bytes (the data file is truncated)")
    raw = data[start:start + size]
    count = int(np.prod(shape, dtype=np.int64))
    if entry.dtype == proto.messages().DataType.DT_STRING:
        return _string_values(raw, count, entry.crc32c, key, where).reshape(shape)
    if mask(crc32c(raw)) != entry.crc32c:
        raise errors.DataLossError(f"{where}: the checksum of {key!r} does not match its "
                                   "bytes (the data file is damaged)")
    try:
        dt = proto.from_datatype(entry.dtype)
    except Exception:
        raise errors.UnimplementedError(
            f"{where}: {key!r} has dtype {entry.dtype}, which pluggable cannot hold") from None
    np_dtype = np.dtype(dt.as_numpy_dtype).newbyteorder("<")
    if count * np_dtype.itemsize != size:
        raise errors.DataLossError(f"{where}: {key!r} holds {size} bytes, not the "
                                   f"{count * np_dtype.itemsize} of its shape {list(shape)}")
    return np.frombuffer(raw, np_dtype).astype(np_dtype.newbyteorder("="))\
        .reshape(shape)
