"""A trace Record's bytes, written without building protobuf messages, and its columns read back as arrays.

A Record is encoded here field by field as the protobuf library would (fields in number order, proto3 zero
values left out, ``shape`` packed), from bytes joined around the arrays' buffers: building ``Column`` messages
and serializing the ``Record`` cost several times as much per batch (tests/test_trace.py checks that the library
reads these bytes and writes the same ones).
"""

import numpy as np

from ..errors import ConfigError

__all__ = ["TYPES", "DTYPES", "as_array", "column_bytes", "record_pieces", "record_bytes", "column_array"]

# Type of trace.proto by numpy dtype; bytes (and uint8, the dtype of a byte buffer) are Byte
TYPES: dict[np.dtype, int] = {
    np.dtype(np.int8): 0,
    np.dtype(np.int16): 1,
    np.dtype(np.int32): 2,
    np.dtype(np.int64): 3,
    np.dtype(np.float32): 4,
    np.dtype(np.float64): 5,
    np.dtype(np.bool_): 6,
    np.dtype(np.uint8): 7,
}
DTYPES = {code: dtype for dtype, code in TYPES.items()}  # Byte reads back as uint8
_NATIVE = frozenset(t for t in TYPES if t.byteorder in "=|")
_INT32_MAX = 2**31 - 1


_ONE_BYTE = [bytes((i,)) for i in range(128)]


def _varint(n):
    """The protobuf varint of ``n`` (an int64: negative ones take ten bytes, as protobuf writes them)."""
    if 0 <= n < 128:  # most fields of a record: per-batch Python is what tracing costs
        return _ONE_BYTE[n]
    if 0 <= n < 16384:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    n &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def as_array(key, value):
    """``value`` (a numpy array, a torch tensor, bytes, a scalar) as a C-ordered little-endian array of a dtype the
    format has; a ``ConfigError`` naming the key otherwise."""
    if type(value) is np.ndarray and value.dtype in _NATIVE and value.flags.c_contiguous:  # a batch's arrays
        if value.ndim and max(value.shape) > _INT32_MAX:
            raise ConfigError(f"trace key {key!r}: shape {value.shape} has a dimension past int32, the format's")
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return np.frombuffer(value, np.uint8)
    if not isinstance(value, np.ndarray):
        if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor, without importing torch
            value = value.detach().cpu().numpy()
        else:
            value = np.asarray(value)
    dtype = value.dtype
    if dtype.kind == "S":  # fixed-width bytes: their bytes, one more axis of the item size
        value = value.copy(order="C").view(np.uint8).reshape(*value.shape, dtype.itemsize)
    elif dtype.byteorder == ">":
        value = value.astype(dtype.newbyteorder("<"))
    if value.dtype not in TYPES:
        raise ConfigError(
            f"trace key {key!r}: dtype {value.dtype} is not in the trace format; expected int8, int16, int32, "
            f"int64, float32, float64, bool, or bytes / uint8 (Byte)"
        )
    if value.ndim and max(value.shape) > _INT32_MAX:
        raise ConfigError(f"trace key {key!r}: shape {value.shape} has a dimension past int32, the format's")
    return value if value.flags.c_contiguous else value.copy(order="C")  # ascontiguousarray makes 0-d arrays 1-d


_DTYPE_FIELD = {dtype: b"\x08" + _varint(code) if code else b"" for dtype, code in TYPES.items()}


def column_bytes(arr):
    """The bytes of ``Record.column`` (field 3) holding ``arr`` (C-contiguous): its tag and length, then the
    ``Column``; the data copied once."""
    head = _DTYPE_FIELD[arr.dtype]
    if arr.ndim == 1:
        dims = _varint(arr.shape[0])
        head += b"\x12" + _ONE_BYTE[len(dims)] + dims
    elif arr.ndim:
        dims = b"".join([_varint(d) for d in arr.shape])
        head += b"\x12" + _varint(len(dims)) + dims
    n = arr.nbytes
    if n:  # numpy arrays give bytes.join their buffer: the only copy of the data
        return b"".join((b"\x1a", _varint(len(head) + n + 1 + len(_varint(n))), head, b"\x1a", _varint(n), arr))
    return b"\x1a" + _varint(len(head)) + head


def record_pieces(gstep, lstep, columns, timestamp):
    """A length-prefixed Record as pieces to append one after the other: u32 LE length with gstep and lstep, the
    ``columns`` (of ``column_bytes``), timestamp."""
    first = (b"\x08" + _varint(gstep) if gstep else b"") + (b"\x10" + _varint(lstep) if lstep else b"")
    last = b"\x20" + _varint(timestamp) if timestamp else b""
    size = len(first) + sum(map(len, columns)) + len(last)
    if size >= 1 << 32:
        raise ValueError(f"{size} bytes, past the format's u32 length")
    return [size.to_bytes(4, "little") + first, *columns, last]


def record_bytes(gstep, lstep, columns, timestamp):
    """The pieces of ``record_pieces`` joined."""
    return b"".join(record_pieces(gstep, lstep, columns, timestamp))


def column_array(column):
    """The array of a parsed ``Column`` (a read-only view of its data); ValueError when they do not agree."""
    dtype = DTYPES.get(column.dtype)
    if dtype is None:
        raise ValueError(f"dtype {column.dtype}, not a Type of trace.proto")
    shape = tuple(column.shape)
    want = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(column.data) != want:
        raise ValueError(f"{len(column.data)} data bytes for shape {list(shape)} of {dtype}, expected {want}")
    return np.frombuffer(column.data, dtype).reshape(shape)
