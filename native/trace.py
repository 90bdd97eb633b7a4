"""The kernel that writes trace records (``ingest.trace.TraceWriter``): a length-prefixed ``Record`` of XDL's
``trace.proto`` into a chunk of bytes, each column's data copied once.

Fields are written as the protobuf library writes them: in number order, proto3 zero values left out, ``shape``
packed (tests/test_trace_kernel.py checks the library writes the same bytes).  A record is whole after every
call: the columns of a later write of the same step (a trainer's loss after the reader's arrays) go where its
timestamp was, and the timestamp and length are written again.
"""

import numpy as np

from .encode import _put_varint, _vlen
from .index import _u
from .jit import helper, kernel_keeping_gil
from .text_write import _put_bytes

TAG_GSTEP, TAG_LSTEP, TAG_COLUMN, TAG_TIMESTAMP = 0x08, 0x10, 0x1A, 0x20  # Record's fields 1, 2, 3 (bytes), 4
TAG_DTYPE, TAG_SHAPE, TAG_DATA = 0x08, 0x12, 0x1A  # Column's fields 1, 2 (packed), 3 (bytes)
U32_LIMIT = 1 << 32  # a record's length prefix is a u32
DERIVED = -1  # a first dimension in a layout that the column's data length gives
ITEM_BYTES = np.array([1, 2, 4, 8, 4, 8, 1, 1], np.int64)  # by trace.proto's Type (as ingest/trace/columns.py)


@helper
def _optional(tagged_value):
    """Bytes of a varint field (one-byte tag) holding ``tagged_value``: none for 0, proto3's default."""
    return 0 if tagged_value == 0 else 1 + _vlen(tagged_value)


@helper
def _dim(layout, at, d, nbytes):
    """Dimension ``d`` of the column whose layout starts at ``layout[at]``."""
    n = layout[at + 2 + d]
    if n != DERIVED:
        return n
    row = ITEM_BYTES[layout[at]]
    for k in range(1, layout[at + 1]):
        row *= layout[at + 2 + k]
    return nbytes // row


@helper
def _column_body(layout, at, nbytes):
    """``(size of the Column, size of its packed shape, index past its layout)``; ``layout[at:]`` is its dtype
    code, number of dimensions, dimensions."""
    ndim = layout[at + 1]
    dims = 0
    for d in range(ndim):
        dims += _vlen(_dim(layout, at, d, nbytes))
    body = _optional(layout[at])
    if ndim:
        body += 1 + _vlen(dims) + dims
    if nbytes:
        body += 1 + _vlen(nbytes) + nbytes
    return body, dims, at + 2 + ndim


@kernel_keeping_gil
def encode_columns(out, pos, record, gstep, lstep, timestamp, layout, datas):
    """Add ``Record.column`` fields to the record at ``out[record:pos]`` (whole, as this kernel left it), or to a
    new record at ``pos`` when ``record`` is negative; the new end of the record, or minus the bytes it needs past
    ``pos`` when ``out`` has less room than that (nothing written).

    ``layout`` is the number of columns, then per column its dtype code, number of dimensions and dimensions (the
    first may be ``DERIVED``); ``datas`` the columns' bytes (uint8 arrays; more than the columns allowed, the rest
    is not read)."""
    gstep, lstep, timestamp = np.int64(gstep), np.int64(lstep), np.int64(timestamp)  # Python's ints cannot wrap
    tail = _optional(timestamp)
    if record < 0:
        p = pos
        size = 4 + _optional(gstep) + _optional(lstep)
    else:
        p = pos - tail
        size = -tail
    at = 1
    for c in range(layout[0]):
        body, _, at = _column_body(layout, at, len(datas[c]))
        size += 1 + _vlen(body) + body
    size += tail
    if pos + size > len(out):
        return -size
    if record < 0:
        record = p
        p += 4
        if gstep != 0:
            out[_u(p)] = TAG_GSTEP
            p = _put_varint(out, p + 1, gstep)
        if lstep != 0:
            out[_u(p)] = TAG_LSTEP
            p = _put_varint(out, p + 1, lstep)
    at = 1
    for c in range(layout[0]):
        data = datas[c]
        body, dims, next_at = _column_body(layout, at, len(data))
        out[_u(p)] = TAG_COLUMN
        p = _put_varint(out, p + 1, body)
        if layout[at] != 0:
            out[_u(p)] = TAG_DTYPE
            p = _put_varint(out, p + 1, layout[at])
        ndim = layout[at + 1]
        if ndim:
            out[_u(p)] = TAG_SHAPE
            p = _put_varint(out, p + 1, dims)
            for d in range(ndim):
                p = _put_varint(out, p, _dim(layout, at, d, len(data)))
        if len(data):
            out[_u(p)] = TAG_DATA
            p = _put_varint(out, p + 1, len(data))
            p = _put_bytes(out, p, data, 0, len(data))
        at = next_at
    if timestamp != 0:
        out[_u(p)] = TAG_TIMESTAMP
        p = _put_varint(out, p + 1, timestamp)
    length = p - record - 4  # the caller keeps records under U32_LIMIT
    for k in range(4):
        out[_u(record + k)] = (length >> (8 * k)) & 0xFF
    return p
