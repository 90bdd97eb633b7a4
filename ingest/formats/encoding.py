"""Writing the protobuf formats: the Feature headers of a schema, and Blocks of text input as pb/spb records.

``RecordEncoder`` serves ``ingest convert`` (text -> pb/spb, with structured compression: the aux features of a
group stored once in table 1) and the Python ops' slow path, which sees each group as a ``SampleGroup``.
"""

import numpy as np

from .._native.encode import encode_groups
from ..features import DenseLayout

__all__ = ["RecordEncoder", "byte_blob"]


def _header(name, dense):
    """The ``type`` and ``name`` fields of a Feature message."""
    raw = name.encode()
    return bytes([0x08, 2 if dense else 1, 0x12]) + _varint(len(raw)) + raw


def _varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def byte_blob(parts):
    """``(blob, offsets)``: the bytes strings ``parts`` one after the other, as numba kernels take a list of them."""
    blob = np.frombuffer(b"".join(parts), np.uint8).copy()
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
    return blob, offsets


class RecordEncoder:
    """Encodes Blocks of text input as pb or spb records (bytes)."""

    def __init__(self, schema, aux, simple):
        self.simple = simple
        self.sp_aux = np.array([s.name in aux for s in schema.sparse], np.bool_)
        self.dn_aux = np.array([s.name in aux for s in schema.dense], np.bool_)
        self.sp_hdr = byte_blob([_header(s.name, False) for s in schema.sparse])
        self.dn_hdr = byte_blob([_header(s.name, True) for s in schema.dense])
        self.layout = DenseLayout(schema.dense)

    def encode(self, blk):
        table = blk.tables[0]
        dense = np.hstack(table.dense) if table.dense else np.zeros((blk.nrows, 0), np.float32)
        biggest = int(np.diff(blk.group_offsets).max()) if len(blk.group_offsets) > 1 else 0
        refer = np.empty(biggest, np.int64)
        distinct = np.empty(biggest, np.int64)
        line_size = np.empty(2 * biggest, np.int64)
        bodies = np.empty((2 * biggest, table.sp_offsets.shape[0]), np.int64)
        out = np.empty(max(1 << 16, blk.nbytes), np.uint8)
        parts = []
        g, pos = 0, 0
        while g < len(blk.group_offsets) - 1:
            g2, pos = encode_groups(
                g,
                blk.group_offsets,
                self.simple,
                table.sp_offsets,
                blk.sp_keys,
                blk.sp_values,
                self.sp_aux,
                *self.sp_hdr,
                dense,
                self.layout.first_col,
                self.layout.width,
                self.dn_aux,
                *self.dn_hdr,
                blk.labels,
                blk.timestamps,
                blk.sid_bytes,
                blk.sid_offsets,
                out,
                pos,
                refer,
                distinct,
                line_size,
                bodies,
            )
            if g2 == g and pos == 0:
                out = np.empty(2 * len(out), np.uint8)  # one group larger than the buffer
                continue
            parts.append(out[:pos].copy())
            pos = 0
            g = g2
        return parts
