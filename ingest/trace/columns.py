"""The arrays of a trace's columns: what ``TraceWriter.write`` accepts, as the kernel that encodes them
(``ingest._native.trace``) takes them, and read back from a parsed ``Column``."""

import numpy as np

from ..errors import ConfigError

__all__ = ["TYPES", "DTYPES", "column_of", "column_array"]

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


def column_of(key, value):
    """``(dtype code, shape, data)`` of ``value`` (a numpy array, a torch tensor, bytes, a scalar) as the encoding
    kernel takes a column: ``data`` its bytes in C order, little-endian, a writeable (numba gives read-only
    arrays a type of their own) uint8 array of one dimension, the array's own memory where it can be; a
    ``ConfigError`` naming the key for what the format lacks."""
    if type(value) is np.ndarray and value.dtype in _NATIVE:  # a batch's arrays
        flags, shape = value.flags, value.shape
        if flags.c_contiguous and flags.writeable and (not shape or max(shape) <= _INT32_MAX):
            return TYPES[value.dtype], shape, (value if len(shape) == 1 else value.reshape(-1)).view(np.uint8)
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = np.frombuffer(value, np.uint8)
    elif not isinstance(value, np.ndarray):
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
    if not (value.flags.c_contiguous and value.flags.writeable):
        value = value.copy(order="C")  # ascontiguousarray makes 0-d arrays 1-d
    return TYPES[value.dtype], value.shape, value.reshape(-1).view(np.uint8)


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
