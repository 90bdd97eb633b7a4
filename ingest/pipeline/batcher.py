"""Cutting the block stream into batches (FORMATS.md section 3 batching rules)."""
import time

import numpy as np

from .._native.batch import (copy_dense_ranges, copy_sparse_ranges, count_ranges, feature_bases, group_ranges,
                             refer_ranges, write_indicators)
from .._native.unique import table_size, unique_ids_of_table, unique_layout
from .pool import BufferPool
from ..batch import Batch, SparseFeature
from ..errors import GroupTooLargeError
from .progress import Marks

__all__ = ["BatchBuilder", "cut_batches", "FLUSH"]

FLUSH = object()  # in the block stream: deliver the partial batch (nothing else can complete it)

_NO_HKEYS = np.empty(0, np.int64)
_NO_VALUES = np.empty(0, np.float32)
_NO_FLAGS = np.empty(0, np.bool_)


class BatchBuilder:
    """Builds one Batch from pieces ``(block, r0, r1)`` of consecutive rows of table 0.

    For data with aux tables each piece also takes, per group, the contiguous range of
    aux rows its rows refer to (FORMATS.md section 3), and ``batch.indicators[k]`` maps
    every row of table k to its row of table k + 1 in the batch.
    """

    def __init__(self, schema, batch_size, pad, unique=False, stats=None, pool=None, track=False,
                 keep_pieces=False):
        self.schema = schema
        self.keep_pieces = keep_pieces  # the batch keeps its pieces (keep_sample, pause: its groups are released)
        self.track = track  # record the position each batch delivers up to (reader state)
        self.pool = pool if pool is not None else BufferPool()
        self.scratch = UniqueScratch()
        self.batch_size = batch_size
        self.pad = pad
        self.unique = unique
        self.stats = stats
        self.tables = schema.tables
        self.sparse = [schema.sparse_in(t) for t in range(self.tables)]
        self.dense = [schema.dense_in(t) for t in range(self.tables)]
        self.pair = [np.array([not s.serialized for s in specs], np.bool_) for specs in self.sparse]
        self.table_of = {s.name: s.table for s in schema.specs}

    def _ranges(self, blk, r0, r1):
        """Per table, ``(lo, hi, m)``: the rows of that table the piece takes, one range per group."""
        if self.tables == 1:
            return [(np.array([r0], np.int64), np.array([r1], np.int64), 1)]
        lo = np.empty(r1 - r0, np.int64)
        hi = np.empty(r1 - r0, np.int64)
        m = group_ranges(blk.group_offsets, r0, r1, lo, hi)
        plan = [(lo, hi, m)]
        for k in range(self.tables - 1):
            next_lo = np.empty(m, np.int64)
            next_hi = np.empty(m, np.int64)
            refer_ranges(blk.tables[k].refer, lo, hi, m, next_lo, next_hi)
            plan.append((next_lo, next_hi, m))
            lo, hi = next_lo, next_hi
        return plan

    def build(self, pieces):
        """The Batch of ``pieces``, unique ids included."""
        return self.add_unique(self.assemble(pieces))

    def assemble(self, pieces):
        """The Batch of ``pieces`` without its unique ids: ``add_unique`` completes it (the pipeline
        runs that on a thread of its own, so that one batch's unique ids overlap the next one's build)."""
        t0 = time.perf_counter()
        n = sum(r1 - r0 for _, r0, r1 in pieces)
        rows0 = self.batch_size if self.pad else n
        padded = rows0 > n
        plans = [self._ranges(blk, r0, r1) for blk, r0, r1 in pieces]
        rows = [rows0]
        for t in range(1, self.tables):  # aux rows, plus the empty row padded rows point at
            rows.append(sum(int((hi[:m] - lo[:m]).sum()) for lo, hi, m in (p[t] for p in plans)) + padded)
        found = {}
        tables = []  # per table, what add_unique_ids takes of it
        for t in range(self.tables):
            found.update(self._table(t, pieces, plans, rows[t], tables))
        features = {s.name: found[s.name] for s in self.schema.specs}
        indicators = []
        for k in range(self.tables - 1):
            ind = self.pool.lease(rows[k], np.int32)
            row = packed = 0
            for (blk, _, _), plan in zip(pieces, plans):
                lo, hi, m = plan[k]
                next_lo, next_hi, _ = plan[k + 1]
                row, packed = write_indicators(blk.tables[k].refer, lo, hi, next_lo, next_hi, m, ind, row, packed)
            ind[row:] = rows[k + 1] - 1
            indicators.append(ind)
        labels = self.pool.lease((rows0, self.schema.label_count), np.float32)
        timestamps = self.pool.lease(rows0, np.int64)
        sid_bytes = self.pool.lease(sum(int(blk.sid_offsets[r1] - blk.sid_offsets[r0]) for blk, r0, r1 in pieces),
                                    np.uint8)
        sid_offsets = self.pool.lease(n + 1, np.int64)
        sid_offsets[0] = 0
        row = 0
        for blk, r0, r1 in pieces:
            k = r1 - r0
            labels[row:row + k] = blk.labels[r0:r1]
            timestamps[row:row + k] = blk.timestamps[r0:r1]
            a, b = blk.sid_offsets[r0], blk.sid_offsets[r1]
            at = sid_offsets[row]
            sid_bytes[at:at + b - a] = blk.sid_bytes[a:b]
            sid_offsets[row + 1:row + k + 1] = blk.sid_offsets[r0 + 1:r1 + 1] - a + at
            row += k
        labels[n:] = 0
        timestamps[n:] = 0
        batch = Batch(n, labels, timestamps, sid_bytes, sid_offsets, features, indicators,
                      tables=self.table_of, table_rows=rows)
        batch.marks = Marks({blk.unit: blk.position(r1) for blk, _, r1 in pieces} if self.track else {})
        if self.keep_pieces:
            batch.pieces = list(pieces)
        if self.unique:
            batch.unique_work = tables
        if self.stats is not None:
            self.stats.stage("batch", t0, time.perf_counter(), size=n)
        return batch

    def add_unique(self, batch):
        """Fill the unique ids of a batch from ``assemble`` (nothing to do without ``unique``); returns it."""
        tables, batch.unique_work = batch.unique_work, ()
        if tables:
            t0 = time.perf_counter()
            for table in tables:
                add_unique_ids(*table, self.pool, self.scratch)
            if self.stats is not None:
                self.stats.stage("unique", t0, time.perf_counter())
        return batch

    def _table(self, t, pieces, plans, rows, tables):
        """The features of table ``t`` over ``rows`` rows: sparse CSR and dense matrices by name; its sparse
        features and their buffers go to the list ``tables``."""
        specs = self.sparse[t]
        pair = self.pair[t]
        counts = np.zeros(len(specs), np.int64)
        for (blk, _, _), plan in zip(pieces, plans):
            lo, hi, m = plan[t]
            count_ranges(blk.tables[t].sp_offsets, lo, hi, m, counts)
        key_base = np.empty(len(specs), np.int64)
        value_base = np.empty(len(specs), np.int64)
        nkeys, npairs, nvalues = feature_bases(counts, pair, key_base, value_base)
        offsets = self.pool.lease((len(specs), rows + 1), np.int64)
        offsets[:, 0] = 0
        keys = self.pool.lease(nkeys, np.int64)
        pairs = self.pool.lease((npairs, 2), np.int64)
        values = self.pool.lease(nvalues, np.float32)
        dense = [self.pool.lease((rows, s.width), np.float32) for s in self.dense[t]]
        row = 0
        for (blk, _, _), plan in zip(pieces, plans):
            lo, hi, m = plan[t]
            tab = blk.tables[t]
            hkeys = blk.sp_hkeys if blk.sp_hkeys is not None else _NO_HKEYS
            for out, src in zip(dense, tab.dense):
                copy_dense_ranges(src, lo, hi, m, out, row)
            if tab.from_dsl is None:
                dsl = (_NO_HKEYS, _NO_VALUES, _NO_FLAGS)
            else:
                dsl = (blk.dsl_keys, blk.dsl_values, tab.from_dsl)
            row = copy_sparse_ranges(tab.sp_offsets, blk.sp_keys, hkeys, blk.sp_values, *dsl, lo, hi, m, row,
                                     pair, key_base, value_base, offsets, keys, pairs, values)
        # padding and the aux padding row: empty sparse rows, zero dense rows
        offsets[:, row + 1:] = offsets[:, row:row + 1]
        for out in dense:
            out[row:] = 0
        out = {}
        feats = []
        for f, (spec, kb, vb, c) in enumerate(zip(specs, key_base.tolist(), value_base.tolist(), counts.tolist())):
            ids = pairs[kb:kb + c] if pair[f] else keys[kb:kb + c]
            feats.append(SparseFeature(spec.name, ids, values[vb:vb + c], offsets[f]))
            out[spec.name] = feats[-1]
        if feats:
            tables.append((feats, keys, pairs, pair, key_base, counts, offsets))
        for spec, arr in zip(self.dense[t], dense):
            out[spec.name] = arr
        return out


class UniqueScratch:
    """The hash table and work arrays of ``add_unique_ids``, kept by one batcher and grown when needed."""

    def __init__(self):
        self.slots = np.empty(0, np.int32)
        self.hashes = np.empty(0, np.uint64)
        self.work_h = np.empty(0, np.int64)
        self.work_counts = np.empty(0, np.int64)

    def room(self, n):
        """The scratch arrays for features of at most ``n`` ids."""
        size = table_size(n)
        if len(self.slots) < size:
            self.slots = np.empty(size, np.int32)
        if len(self.work_counts) < n:
            self.hashes = np.empty(2 * n, np.uint64)
            self.work_h = np.empty(2 * n, np.int64)
            self.work_counts = np.empty(2 * n, np.int64)
        return self.slots, self.hashes, self.work_h, self.work_counts


def add_unique_ids(feats, keys, pairs, pair, key_base, counts, offsets, pool, scratch):
    """Fill ``unique_ids``, ``inverse``, ``unique_rows`` and ``unique_row_offsets`` of the SparseFeatures
    ``feats`` of one table, whose ids are ``counts[f]`` from ``key_base[f]`` in ``keys`` (``pairs`` when
    ``pair[f]``) and whose row offsets are ``offsets[f]``: one kernel call and one lease for them all.

    One leased buffer holds, as int64, every feature's unique ids and then their row offsets, and as
    int32 every inverse and then every feature's unique rows (free once the batch and its arrays are gone).
    """
    nf = len(feats)
    at = np.empty(nf + 1, np.int64)
    words = np.empty(nf + 1, np.int64)
    total, nwords = unique_layout(counts, pair, at, words)
    nbig = nwords + total + nf
    buf = pool.lease(8 * nbig + 4 * 2 * total, np.uint8)
    big = buf[:8 * nbig].view(np.int64)
    small = buf[8 * nbig:].view(np.int32)
    nunique = np.empty(nf, np.int64)
    unique_ids_of_table(keys, pairs, pair, key_base, counts, at, words, offsets,
                        *scratch.room(int(counts.max(initial=0))), small, big, nunique)
    for f, (feat, a, n, w, u) in enumerate(zip(feats, at.tolist(), counts.tolist(), words.tolist(), nunique.tolist())):
        feat.inverse = small[a:a + n]
        feat.unique_rows = small[total + a:total + a + n]
        feat.unique_ids = big[w:w + 2 * u].reshape(u, 2) if pair[f] else big[w:w + u]
        o = nwords + a + f
        feat.unique_row_offsets = big[o:o + u + 1]


def cut_batches(blocks, builder, *, split_group=True, drop_last=False, on_skip=None, rounds=None, build=None):
    """Yield Batches from an iterable of Blocks, each made by ``build(pieces)`` (default ``builder.build``).

    With ``split_group`` a group that does not fit is cut at the batch boundary; without
    it the group moves whole to the next batch, and a group larger than the batch size
    raises ``GroupTooLargeError`` (or goes to ``on_skip`` when given).  The last batch
    may be short; ``drop_last`` drops it.  ``FLUSH`` in the stream delivers the partial batch (or comes
    out as FLUSH when nothing is pending);
    ``rounds`` is told of every group packed whole (or skipped).  If the block stream raises, the samples
    already taken are delivered as a short batch first, then the error propagates.
    """
    size = builder.batch_size
    build = build or builder.build
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
                yield build(pieces)
            raise
        if blk is FLUSH:
            if pieces:
                yield build(pieces)
                pieces, filled = [], 0
            else:
                yield FLUSH
            continue
        r = blk.skip  # rows delivered before a restore
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
                        yield build(pieces)
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
                    if rounds is not None:
                        rounds.dropped(1)
                    r = g_end
                    continue
            if rounds is not None:  # groups whose last row is taken now
                a, b = np.searchsorted(ends, [r, r + take], side="right")
                rounds.packed(int(b - a))
            pieces.append((blk, r, r + take))
            filled += take
            r += take
            if filled == size:
                yield build(pieces)
                pieces, filled = [], 0
    if pieces and not drop_last:
        yield build(pieces)
