"""A trace Record's bytes, written without building protobuf messages, and its columns read back as arrays.

A Record is encoded here field by field as the protobuf library would (fields in number order, proto3 zero
values left out, ``shape`` packed): the column's data is then copied once, from the array into the bytes handed
to the writer thread, where building a ``Column`` message and serializing the ``Record`` would copy it twice more
(tests/test_trace.py checks that the library reads these bytes and writes the same ones).
"""

import numpy as np

from ..errors import ConfigError

__all__ = ["TYPES", "DTYPES", "as_array", "column_bytes", "record_pieces", "column_array"]

# Type of trace.proto by numpy dtype; bytes (and uint8, the dtype of a byte buffer) are Byte
TYPES = {
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
_INT32_MAX = 2**31 - 1


def _varint(n):
    """The protobuf varint of ``n`` (an int64: negative ones take ten bytes, as protobuf writes them)."""
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
    if any(d > _INT32_MAX for d in value.shape):
        raise ConfigError(f"trace key {key!r}: shape {value.shape} has a dimension past int32, the format's shape type")
    return value if value.flags.c_contiguous else value.copy(order="C")  # ascontiguousarray makes 0-d arrays 1-d


def column_bytes(arr):
    """The bytes of ``Record.column`` (field 3) holding ``arr``: its tag and length, then the ``Column``."""
    code = TYPES[arr.dtype]
    head = b"\x08" + _varint(code) if code else b""
    if arr.ndim:
        dims = b"".join(_varint(d) for d in arr.shape)
        head += b"\x12" + _varint(len(dims)) + dims
    if arr.nbytes:
        head += b"\x1a" + _varint(arr.nbytes)
        return b"".join((b"\x1a", _varint(len(head) + arr.nbytes), head, arr.reshape(-1).view(np.uint8)))
    return b"\x1a" + _varint(len(head)) + head


def record_pieces(gstep, lstep, columns, timestamp):
    """The pieces of a length-prefixed Record: ``[u32 LE length + gstep and lstep, *columns, timestamp]``."""
    first = (b"\x08" + _varint(gstep) if gstep else b"") + (b"\x10" + _varint(lstep) if lstep else b"")
    last = b"\x20" + _varint(timestamp) if timestamp else b""
    size = len(first) + sum(len(c) for c in columns) + len(last)
    return [size.to_bytes(4, "little") + first, *columns, last]


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
