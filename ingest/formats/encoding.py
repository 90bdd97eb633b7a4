"""Writing the protobuf formats: the Feature headers of a schema, and Blocks of text input as pb/spb records.

``RecordEncoder`` serves ``ingest convert`` (text -> pb/spb, with structured compression: the aux features of a
group stored once in table 1) and the Python ops' slow path, which sees each group as a ``SampleGroup``.
"""

import numpy as np

from .._native.encode import EncodeScratch, FeatureColumns, EncodeLayout, SampleColumns, encode_groups
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
        (sp_hdr, sp_hdr_off), (dn_hdr, dn_hdr_off) = self.sp_hdr, self.dn_hdr
        self.feature_layout = EncodeLayout(
            sp_aux=self.sp_aux,
            sp_hdr=sp_hdr,
            sp_hdr_off=sp_hdr_off,
            dn_base=self.layout.first_col,
            dn_width=self.layout.width,
            dn_aux=self.dn_aux,
            dn_hdr=dn_hdr,
            dn_hdr_off=dn_hdr_off,
        ).checked()

    def encode(self, blk):
        table = blk.tables[0]
        dense = np.hstack(table.dense) if table.dense else np.zeros((blk.nrows, 0), np.float32)
        biggest = int(np.diff(blk.group_offsets).max()) if len(blk.group_offsets) > 1 else 0
        samples = SampleColumns(
            group_offsets=blk.group_offsets,
            labels=blk.labels,
            timestamps=blk.timestamps,
            sid_bytes=blk.sid_bytes,
            sid_off=blk.sid_offsets,
        ).checked()
        features = FeatureColumns(
            offsets=table.sp_offsets, keys=blk.sp_keys, values=blk.sp_values, dense=dense
        ).checked()
        scratch = EncodeScratch(
            refer=np.empty(biggest, np.int64),
            distinct=np.empty(biggest, np.int64),
            line_size=np.empty(2 * biggest, np.int64),
            bodies=np.empty((2 * biggest, table.sp_offsets.shape[0]), np.int64),
        ).checked()
        out = np.empty(max(1 << 16, blk.nbytes), np.uint8)
        parts = []
        g, pos = 0, 0
        while g < len(blk.group_offsets) - 1:
            g2, pos = encode_groups(g, self.simple, samples, features, self.feature_layout, scratch, out, pos)
            if g2 == g and pos == 0:
                out = np.empty(2 * len(out), np.uint8)  # one group larger than the buffer
                continue
            parts.append(out[:pos].copy())
            pos = 0
            g = g2
        return parts
