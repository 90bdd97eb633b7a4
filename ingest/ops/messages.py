"""The Python-op slow path: a Block's groups as ``SampleGroup`` messages, and kept messages back to a Block.

``GroupCodec.encode`` writes every group of a block as one length-prefixed record (numba,
all tables, 128-bit ids kept); the op stage parses each with ``ingest.sample_pb2``, runs
the Python ops on it, serializes what they keep, and ``GroupCodec.decode`` reads those
records with the ``pb`` front end into a Block of the same schema.  Python work is per
group (one parse, the ops, one serialize); everything per value is in the kernels.
"""

import dataclasses
import io

import numpy as np

from .._native import ops as K
from ..features import FeatureType, Schema
from ..formats.encoding import RecordEncoder
from ..formats.protobuf import ProtobufFormat
from ..sources.files import FileRange, FileStream
from .blocks import concat_blocks

__all__ = ["GroupCodec"]

_NONE_I = np.empty(0, np.int64)


def _as_parsed(spec):
    """The declaration that reads back a column as the block holds it: cutoff and mask already applied."""
    if spec.type is FeatureType.dense:
        return dataclasses.replace(spec, nvec=spec.width, mask=None)
    return dataclasses.replace(spec, cutoff=0)


class GroupCodec:
    """Encodes the groups of Blocks of ``schema`` as ``SampleGroup`` records, and decodes records back.

    Parameters
    ----------
    schema : Schema
        The parsed features (no DSL ones) of the blocks.
    """

    def __init__(self, schema):
        self.schema = schema
        self.tables = []
        for t in range(schema.tables):
            # the conversion encoder's Feature headers and dense layout, one table at a time
            enc = RecordEncoder(Schema(schema.sparse_in(t) + schema.dense_in(t), schema.label_count), set(), False)
            self.tables.append(
                K.TableHeaders(*enc.sp_hdr, *enc.dn_hdr, enc.layout.first_col, enc.layout.width).checked()
            )
        self.format = ProtobufFormat(Schema([_as_parsed(s) for s in schema.specs], schema.label_count, schema.tables))

    def encode(self, blk):
        """``(records, starts)``: uint8 bytes of every group's record, and int64 ``[G + 1]`` record starts.

        Record ``g`` is ``records[starts[g]:starts[g + 1]]``, its 4-byte length first.
        """
        ngroups = len(blk.group_offsets) - 1
        ntables = len(blk.tables)
        lo, hi = blk.group_offsets[:-1].copy(), blk.group_offsets[1:].copy()
        ranges, refers = [(lo, hi)], []
        for tab in blk.tables[:-1]:
            next_lo, next_hi = np.empty(ngroups, np.int64), np.empty(ngroups, np.int64)
            local = np.zeros(tab.nrows, np.int64)
            K.group_line_ranges(lo, hi, tab.refer, next_lo, next_hi, local)
            refers.append(local)
            lo, hi = next_lo, next_hi
            ranges.append((lo, hi))
        refers.append(_NONE_I)
        hkeys = _NONE_I if blk.sp_hkeys is None else blk.sp_hkeys
        table_body = np.empty((ntables, ngroups), np.int64)
        sizes, lines = [], []
        for t, tab in enumerate(blk.tables):
            dense = np.hstack(tab.dense) if tab.dense else np.zeros((tab.nrows, 0), np.float32)
            lines.append(
                K.GroupLines(*ranges[t], tab.sp_offsets, blk.sp_keys, hkeys, blk.sp_values, dense, refers[t]).checked()
            )
            sizes.append(np.empty(tab.nrows, np.int64))
            K.line_sizes(lines[t], self.tables[t], sizes[t], table_body[t])
        starts = np.empty(ngroups + 1, np.int64)
        table_pos = np.empty((ntables, ngroups), np.int64)
        ext_pos = np.empty(ngroups, np.int64)
        total = K.record_layout(
            blk.group_offsets,
            blk.sid_offsets,
            blk.labels.shape[1],
            blk.timestamps,
            table_body,
            starts,
            table_pos,
            ext_pos,
        )
        out = np.empty(total, np.uint8)
        one = np.zeros(1, np.float32)
        bits = (one, one.view(np.uint32))
        for t in range(ntables):
            K.write_table(lines[t], self.tables[t], table_pos[t], table_body[t], sizes[t], bits, out)
        K.write_frames(
            blk.group_offsets, blk.sid_bytes, blk.sid_offsets, blk.labels, blk.timestamps, starts, ext_pos, bits, out
        )
        return out, starts

    def decode(self, records, source):
        """The Block of length-prefixed ``SampleGroup`` records (bytes); raises ``ProtobufDecodeError``.

        Goes through the ``pb`` front end's reader on an in-memory stream (a
        ``ProtobufFormat.decode_bytes`` would spare the work unit).
        """
        unit = FileRange(index=0, url=source, start=0, end=None, size=len(records), compression=None)
        blocks = list(self.format.read_stream(FileStream(io.BytesIO(records), source), unit, None))
        return concat_blocks(blocks)
