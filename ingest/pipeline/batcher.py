"""Cutting the block stream into batches (FORMATS.md section 3 batching rules)."""
import numpy as np

from .._native.batch import copy_sparse_rows
from ..batch import Batch, SparseFeature
from ..errors import GroupTooLargeError

__all__ = ["BatchBuilder", "cut_batches"]

_NO_HKEYS = np.empty(0, np.int64)


class BatchBuilder:
    """Builds one Batch from pieces ``(block, r0, r1)`` of consecutive rows."""

    def __init__(self, schema, batch_size, pad):
        self.schema = schema
        self.batch_size = batch_size
        self.pad = pad
        self.pair = np.array([not s.serialized for s in schema.sparse], np.bool_)

    def build(self, pieces):
        n = sum(r1 - r0 for _, r0, r1 in pieces)
        rows = self.batch_size if self.pad else n
        schema = self.schema
        nfeat = len(schema.sparse)
        counts = np.zeros(nfeat, np.int64)
        for blk, r0, r1 in pieces:
            counts += blk.sp_offsets[:, r1] - blk.sp_offsets[:, r0]
        value_base = np.cumsum(counts) - counts
        pair_counts = np.where(self.pair, counts, 0)
        key_counts = counts - pair_counts
        key_base = np.where(self.pair, np.cumsum(pair_counts) - pair_counts, np.cumsum(key_counts) - key_counts)
        offsets = np.zeros((nfeat, rows + 1), np.int64)
        keys = np.empty(int(key_counts.sum()), np.int64)
        pairs = np.empty((int(pair_counts.sum()), 2), np.int64)
        values = np.empty(int(counts.sum()), np.float32)
        dense = [np.empty((rows, s.width), np.float32) for s in schema.dense]
        labels = np.empty((rows, schema.label_count), np.float32)
        timestamps = np.empty(rows, np.int64)
        sid_parts = []
        sid_offsets = np.empty(n + 1, np.int64)
        sid_offsets[0] = 0
        row = 0
        for blk, r0, r1 in pieces:
            k = r1 - r0
            hkeys = blk.sp_hkeys if blk.sp_hkeys is not None else _NO_HKEYS
            copy_sparse_rows(blk.sp_offsets, blk.sp_keys, hkeys, blk.sp_values, r0, r1, row,
                             self.pair, key_base, value_base, offsets, keys, pairs, values)
            for out, src in zip(dense, blk.dense):
                out[row:row + k] = src[r0:r1]
            labels[row:row + k] = blk.labels[r0:r1]
            timestamps[row:row + k] = blk.timestamps[r0:r1]
            a, b = blk.sid_offsets[r0], blk.sid_offsets[r1]
            sid_parts.append(blk.sid_bytes[a:b])
            sid_offsets[row + 1:row + k + 1] = blk.sid_offsets[r0 + 1:r1 + 1] - a + sid_offsets[row]
            row += k
        if rows > n:  # padding: empty sparse rows, zero dense rows, labels and timestamps
            offsets[:, n + 1:] = offsets[:, n:n + 1]
            for out in dense:
                out[n:] = 0
            labels[n:] = 0
            timestamps[n:] = 0
        features = {}
        for f, spec in enumerate(schema.sparse):
            kb, vb, c = int(key_base[f]), int(value_base[f]), int(counts[f])
            ids = pairs[kb:kb + c] if self.pair[f] else keys[kb:kb + c]
            features[spec.name] = SparseFeature(spec.name, ids, values[vb:vb + c], offsets[f])
        for spec, arr in zip(schema.dense, dense):
            features[spec.name] = arr
        return Batch(n, labels, timestamps, np.concatenate(sid_parts), sid_offsets, features)


def cut_batches(blocks, builder, *, split_group=True, drop_last=False, on_skip=None):
    """Yield Batches from an iterable of Blocks.

    With ``split_group`` a group that does not fit is cut at the batch boundary; without
    it the group moves whole to the next batch, and a group larger than the batch size
    raises ``GroupTooLargeError`` (or goes to ``on_skip`` when given).  The last batch
    may be short; ``drop_last`` drops it.  If the block stream raises, the samples
    already taken are delivered as a short batch first, then the error propagates.
    """
    size = builder.batch_size
    pieces = []
    filled = 0
    it = iter(blocks)
    while True:
        try:
            blk = next(it)
        except StopIteration:
            break
        except Exception:
            if pieces:
                yield builder.build(pieces)
            raise
        r = 0
        ends = blk.group_offsets
        while r < blk.nrows:
            need = size - filled
            if split_group:
                take = min(need, blk.nrows - r)
            else:
                g = np.searchsorted(ends, r + need, side="right") - 1
                take = int(ends[g]) - r
                if take <= 0:
                    if filled:
                        yield builder.build(pieces)
                        pieces, filled = [], 0
                        continue
                    g_end = int(ends[np.searchsorted(ends, r, side="right")])
                    first_id = blk.sid_bytes[blk.sid_offsets[r]:blk.sid_offsets[r + 1]].tobytes()
                    err = GroupTooLargeError(
                        f"sample group of {g_end - r} samples is larger than batch_size={size}; "
                        f"its first sample id, in the chunk that starts at the byte offset given, is",
                        source=blk.source, offset=blk.start, text=first_id.decode("utf-8", "replace"),
                        expected="groups of at most batch_size samples with split_group(False)")
                    if on_skip is None:
                        raise err
                    on_skip(err)
                    r = g_end
                    continue
            pieces.append((blk, r, r + take))
            filled += take
            r += take
            if filled == size:
                yield builder.build(pieces)
                pieces, filled = [], 0
    if pieces and not drop_last:
        yield builder.build(pieces)
