"""Cutting the block stream into batches (docs/formats.md, the batch)."""

import threading
import time

import numpy as np

from .._native.batch import (
    BatchBuffer,
    FeaturePlaces,
    PieceSource,
    batch_layout,
    batch_part_kinds,
    copy_pieces,
    measure_piece,
)
from .._native.parts import KEYS, OFFSETS, VALUES, samples_part
from .._native.unique import BatchIds, table_size, unique_ids_of_batch, unique_rows_of_batch
from ..blocks import placeholder_block
from ..pool import BufferPool
from ..batch import Batch, SparseFeature
from ..errors import GroupTooLargeError
from ..features import Schema, make_feature
from .progress import Marks
from .shuffle import Shuffled, batch_marks

__all__ = ["BatchBuilder", "cut_batches", "FLUSH"]

FLUSH = object()  # in the block stream: deliver the partial batch (nothing else can complete it)

# Stand-ins for what a block or batch lacks (no high words, DSL features, aux tables, dense features...):
# the kernels take arrays, and the items of a tuple share one type.
_NO_INT64 = np.empty(0, np.int64)
_NO_FLOAT32 = np.empty(0, np.float32)
_NO_FLAGS = np.empty(0, np.bool_)
_NO_DENSE = np.empty((0, 0), np.float32)


class BatchBuilder:
    """Builds one Batch from pieces ``(block, r0, r1)`` of consecutive rows of table 0.

    For data with aux tables each piece also takes, per group, the contiguous range of
    aux rows its rows refer to (docs/formats.md, the batch), and ``batch.indicators[k]`` maps
    every row of table k to its row of table k + 1 in the batch.
    """

    def __init__(
        self,
        schema,
        batch_size,
        pad,
        unique=False,
        stats=None,
        pool=None,
        track=False,
        keep_pieces=False,
        kernels_ready=None,
    ):
        self.kernels_ready = kernels_ready  # called once before the first build (warmup.CompileAhead.wait)
        self.keep_pieces = keep_pieces  # the batch keeps its pieces (keep_sample, pause: its groups are released)
        self.track = track  # record the position each batch delivers up to (reader state)
        self.pool = pool if pool is not None else BufferPool()
        self._scratch = _ThreadScratch()  # parse workers that build their own batches share the builder
        self.batch_size = batch_size
        self.pad = pad
        self.unique = unique
        self.stats = stats
        self.tables = schema.tables
        self.table_of = {s.name: s.table for s in schema.specs}
        # Sparse features are numbered over all tables in order (the kernels' order), dense ones too.
        sparse = [s for t in range(self.tables) for s in schema.sparse_in(t)]
        dense = [s for t in range(self.tables) for s in schema.dense_in(t)]
        self.pair = np.array([not s.serialized for s in sparse], np.bool_)
        self.unique = unique and len(sparse) > 0
        self.dense_table = np.array([s.table for s in dense], np.int64)
        bounds = np.cumsum([0] + [len(schema.sparse_in(t)) for t in range(self.tables)]).tolist()
        self.table_bounds = list(enumerate(zip(bounds, bounds[1:])))  # (t, (first feature, end))
        # tables whose sparse features all give int64 ids: their ids lie one after the other in a batch
        self.keys_only = [f1 > f0 and not self.pair[f0:f1].any() for _, (f0, f1) in self.table_bounds]
        self.sparse_names = [[s.name for s in schema.sparse_in(t)] for t in range(self.tables)]  # of each table
        # per sparse feature: its table, and its row in that table's offsets
        self.sparse_table = np.array([s.table for s in sparse], np.int64)
        self.sparse_row = np.array([f - bounds[s.table] for f, s in enumerate(sparse)], np.int64)
        sparse_index = {s.name: f for f, s in enumerate(sparse)}
        dense_index = {s.name: d for d, s in enumerate(dense)}
        # per feature in schema order: (name, is sparse, index, table, row of its table's offsets, pair)
        self.layout = [
            (s.name, True, sparse_index[s.name], s.table, int(self.sparse_row[sparse_index[s.name]]), not s.serialized)
            if s.name in sparse_index
            else (s.name, False, dense_index[s.name], s.table, None, None)
            for s in schema.specs
        ]
        self.dense_width = np.array([s.width for s in dense], np.int64)
        self.table_features = np.array([f1 - f0 for _, (f0, f1) in self.table_bounds], np.int64)
        self.label_count = schema.label_count
        # where in batch_layout's meta each array of a batch is described, its dtype and whether it is a matrix
        kinds = batch_part_kinds(self.tables, len(dense), self.unique)
        self.part_kinds = [(3 * i, dtype, matrix) for i, (dtype, matrix) in enumerate(kinds)]
        self.samples_at = samples_part(self.tables, len(dense))  # where the labels' part is
        self.sums = BatchSums(len(sparse), self.tables, len(kinds))

    def build(self, pieces):
        """The Batch of ``pieces``, unique ids included."""
        return self.assemble(pieces, unique_now=True)

    def assemble(self, pieces, unique_now=False):
        """The Batch of ``pieces``, with its unique ids when ``unique_now``; else ``add_unique`` completes it (where
        batches follow one block stream, the pipeline runs that on a thread of its own, so that one batch's unique
        ids overlap the next one's build).

        A kernel call a piece, one lease and a kernel call a batch: ``measure_piece`` sizes every array,
        ``batch_layout`` places them all in one pooled buffer, ``copy_pieces`` fills them and computes the unique
        ids, for the one or two pieces a batch takes of chunks of a megabyte or more (more pieces go two to a call,
        the last call padding the batch and computing its unique ids). The Python around the kernels was half of a
        batch's build, and every return from a kernel that gives up the GIL is a point where the thread may have to
        sleep until another gives it back. The batch's small arrays are views of two (``BatchSums``): a numpy call
        costs a microsecond or more of Python that runs cold between the kernels.
        """
        if self.kernels_ready is not None:
            self.kernels_ready()
        t0 = time.perf_counter()
        counts, rows, sid_total, at, key_base, value_base, meta = self.sums.arrays()
        scratch = self._scratch.arrays
        room = scratch.ranges
        plans = []
        c0 = 0  # each piece's ranges in columns of their own: a batch's pieces have at most batch_size rows
        for blk, r0, r1 in pieces:
            src = blk.batch_args
            if src is None:
                src = _piece_source(blk)
            c1 = c0 + (r1 - r0 or 1)
            if c1 > room.shape[2]:
                room = scratch.grow_ranges(self.tables, max(c1, self.batch_size))  # earlier pieces keep theirs
            m = measure_piece(blk.group_offsets, src, r0, r1, room, c0, counts, rows, sid_total)
            plans.append((src, r0, r1, room, c0, m))
            c0 = c1
        nbytes, n, nids = batch_layout(
            counts,
            self.pair,
            rows,
            self.batch_size if self.pad else 0,
            sid_total,
            self.table_features,
            self.dense_table,
            self.dense_width,
            self.label_count,
            self.unique,
            (key_base, value_base, meta),
        )
        buf = self.pool.lease_bytes(nbytes)
        places = FeaturePlaces.args(self.pair, key_base, value_base, self.dense_table)
        out = BatchBuffer.args(buf, meta)
        laid = LaidOut(self, buf, meta, key_base, value_base, counts)
        ids = (
            BatchIds.args(buf, meta, self.pair, key_base, counts, self.sparse_table, self.sparse_row)
            if self.unique
            else None
        )
        now = ids if unique_now else None
        ids_room = None if now is None else scratch.table_room(nids)
        plan = scratch.plan
        k = 0
        while k < len(plans):  # calls of one or two pieces planned in one room (no piece grew it for the next)
            two = k + 1 < len(plans) and plans[k + 1][3] is plans[k][3]
            group = plans[k : k + 1 + two]
            for i, (_, r0, r1, _, c0, m) in enumerate(group):
                plan[i, 0], plan[i, 1], plan[i, 2], plan[i, 3] = r0, r1, c0, m
            k += len(group)
            last = k == len(plans)  # pads the batch, and computes its unique ids when now
            src, room = group[0][0], group[0][3]
            copy_pieces(
                src,
                group[-1][0],
                plan[: len(group)],
                room,
                places,
                at,
                out,
                rows,
                last,
                now if last else None,
                ids_room,
            )
        batch = Batch(n, laid, tables=self.table_of, table_rows=rows.tolist())
        batch.marks = Marks({blk.unit: blk.position(r1) for blk, _, r1 in pieces} if self.track else {})
        if self.keep_pieces:
            batch.pieces = list(pieces)
        if now is not None:
            laid.unique_done(ids, nids)
        elif ids is not None:
            batch.unique_work = (laid, ids, nids)
        if self.stats is not None:
            self.stats.stage("batch", t0, time.perf_counter(), size=n)
        return batch

    def scratch(self):
        """This thread's ``Scratch``."""
        return self._scratch.arrays

    def add_unique(self, batch):
        """Fill the unique ids of a batch from ``assemble`` (nothing to do without ``unique``); returns it.

        One kernel call for every feature's (each call into a kernel gives up the GIL, and the other pipeline
        threads hold it), into the batch's buffer (``batch_layout`` places the outputs with the batch's arrays):
        ``big`` holds, as int64, every feature's unique ids and then their row offsets, ``small``, as int32, every
        inverse and then every feature's unique rows; ``layout`` says where each feature's lie (``unique_views``).
        """
        work, batch.unique_work = batch.unique_work, ()
        if work:
            t0 = time.perf_counter()
            laid, ids, nids = work
            unique_ids_of_batch(ids, self._scratch.arrays.table_room(nids))
            laid.unique_done(ids, nids)
            if self.stats is not None:
                self.stats.stage("unique", t0, time.perf_counter())
        return batch


def warm(payload):
    """Compile the batch kernels of a schema (``warmup.compile_ahead``) by building a batch of a placeholder
    Block.  ``payload``: ``{"specs": [FeatureSpec fields], "label_count", "batch_size", "pad", "unique"}``."""
    schema = Schema([make_feature(**spec) for spec in payload["specs"]], payload["label_count"]).raw
    builder = BatchBuilder(schema, payload["batch_size"], payload["pad"], unique=payload["unique"])
    batch = builder.build([(placeholder_block(schema), 0, 1)])
    batch.arrays()  # the unique rows too, which a batch computes when first asked
    if builder.unique:  # a batcher thread's batches, whose unique ids another thread computes (OneStream)
        builder.add_unique(builder.assemble([(placeholder_block(schema), 0, 1)]))


def _piece_source(blk):
    """The ``PieceSource`` of a block as the kernels take it (plain), kept as its ``batch_args``: a block gives
    several batches, and ``assemble`` makes it for the first."""
    offsets, from_dsl, dense, refers = [], [], [], []
    last = blk.tables[-1]
    for tab in blk.tables:  # one loop, not a comprehension each: a Python call is ~1 us here, cold between kernels
        offsets.append(tab.sp_offsets)
        from_dsl.append(_NO_FLAGS if tab.from_dsl is None else tab.from_dsl)
        dense += tab.dense
        if tab is not last:
            refers.append(tab.refer)
    blk.batch_args = (
        PieceSource(
            tuple(offsets),
            tuple(from_dsl),
            tuple(dense) or (_NO_DENSE,),
            tuple(refers) or (_NO_INT64,),
            blk.sp_keys,
            _NO_INT64 if blk.sp_hkeys is None else blk.sp_hkeys,
            blk.sp_values,
            _NO_INT64 if blk.dsl_keys is None else blk.dsl_keys,
            _NO_FLOAT32 if blk.dsl_values is None else blk.dsl_values,
            blk.labels,
            blk.timestamps,
            blk.sid_bytes,
            blk.sid_offsets,
        )
        .checked_when_debugging()
        .plain()
    )  # every Block's arrays are ingest's own (formats, ops, DSL, Arrow)
    return blk.batch_args


class BatchSums:
    """A batch's small arrays, views of two allocations: what its pieces add up, zeroed (per sparse feature its ids
    ``counts``, per table its ``rows``, its sample id bytes ``sid_total``) with ``copy_pieces``' ``at`` (where the next
    piece goes), and where ``batch_layout`` puts its arrays (``key_base``, ``value_base``, ``meta``)."""

    def __init__(self, nsparse, tables, parts):
        f, t = nsparse, tables
        self.sums_size, self.bases_size = f + 3 * t + 2, 2 * f + 3 * parts
        self.sums_at = (slice(0, f), slice(f, f + t), slice(f + t, f + t + 1), slice(f + t + 1, None))
        self.bases_at = (slice(0, f), slice(f, 2 * f), slice(2 * f, None))

    def arrays(self):
        """``(counts, rows, sid_total, at, key_base, value_base, meta)`` of a new batch."""
        sums = np.zeros(self.sums_size, np.int64)
        bases = np.empty(self.bases_size, np.int64)
        counts, rows, sid_total, at = self.sums_at
        key_base, value_base, meta = self.bases_at
        return sums[counts], sums[rows], sums[sid_total], sums[at], bases[key_base], bases[value_base], bases[meta]


class _ThreadScratch(threading.local):
    """Each thread's ``Scratch``, made when the thread first uses it (``threading.local`` runs ``__init__`` once in
    each thread): the builder reads it every batch, an attribute read rather than a call."""

    def __init__(self):
        self.arrays = Scratch()


class Scratch:
    """A thread's work arrays for building batches, kept and grown when needed: the ranges ``measure_piece`` plans
    a batch's pieces in, and the hash table and work arrays of ``BatchBuilder.add_unique`` and ``LaidOut.fill_rows``.

    Slots, places and counts are 32-bit, as ``inverse`` is (a batch holds fewer than 2**31 ids): half the
    memory traffic of 64-bit ones, 0.96-0.97x the kernel's time."""

    def __init__(self):
        self.ranges = np.empty((0, 2, 0), np.int64)
        self.plan = np.empty((2, 4), np.int64)  # copy_pieces' r0, r1, c0, m of a batch's pieces
        self.slots = np.empty(0, np.int32)
        self.places = np.empty(0, np.uint32)
        self.work_counts = np.empty(0, np.int32)

    def grow_ranges(self, tables, columns):
        self.ranges = np.empty((tables, 2, max(columns, 2 * self.ranges.shape[2])), np.int64)
        return self.ranges

    def table_room(self, n):
        """``(slots, places)`` for the unique ids of features of at most ``n`` ids (the caller passes a batch's)."""
        if len(self.slots) <= 2 * n:  # a power of two above 2n holds the table of any feature of at most n ids
            self.slots = np.empty(table_size(n), np.int32)
        return self.slots, self._places(n)

    def rows_room(self, n):
        """``(ranks, counts)`` for the unique rows of features of at most ``n`` ids: the consumer's thread, which
        computes them, needs no hash table."""
        if len(self.work_counts) <= n:  # counts: n + 1
            self.work_counts = np.empty(2 * n + 1, np.int32)
        return self._places(n), self.work_counts

    def _places(self, n):
        if len(self.places) < n:
            self.places = np.empty(2 * n, np.uint32)
        return self.places


def unique_rows_into(ids, nids, scratch):
    """Compute the rows each unique id of a batch occurs in (its unique rows and unique row offsets), once
    ``add_unique`` has computed its unique ids, into the places that left for them: when a consumer first asks
    for them (``LaidOut.fill_rows``): most trainers never do, and they took nearly half the unique ids' time."""
    unique_rows_of_batch(ids, scratch.rows_room(nids))


def unique_views(feats, pair, out, rows_filler=None):
    """Set ``unique_ids``, ``inverse``, ``unique_rows`` and ``unique_row_offsets`` of the SparseFeatures ``feats``
    (in kernel order) to their views of ``out``, ``(big, small, layout)``, as ``add_unique`` placed them, with
    ``rows_filler`` the ``LaidOut`` that fills the unique rows and their offsets when first read (None: filled)."""
    big, small, layout = out
    where = layout.tolist()  # here, when the consumer first asks for a feature, not by the thread that computed them
    nf = len(feats)
    total = len(small) // 2
    at, words, nunique = where[: nf + 1], where[nf + 1 : 2 * nf + 2], where[2 * nf + 2 :]
    nwords = words[nf]
    for f, feat in enumerate(feats):
        a, n, w, u = at[f], at[f + 1] - at[f], words[f], nunique[f]
        o = nwords + a + f
        feat.set_unique(
            big[w : w + 2 * u].reshape(u, 2) if pair[f] else big[w : w + u],
            small[a : a + n],
            small[total + a : total + a + n],
            big[o : o + u + 1],
            rows_filler,
        )


class LaidOut:
    """A built batch as the builder laid it out in its one buffer (``batch_layout``'s ``meta``): its arrays are made
    only when the batch is first asked for one, on the consumer's thread, so that a parse worker spends no Python
    on them (``Batch``), and its features into a dict of SparseFeature views (and dense arrays)."""

    __slots__ = (
        "builder",
        "buf",
        "meta",
        "key_base",
        "value_base",
        "counts",
        "unique",
        "rows_from",
        "_arrays",
    )

    def __init__(self, builder, buf, meta, key_base, value_base, counts):
        self.builder = builder
        self.buf, self.meta = buf, meta
        self.key_base, self.value_base, self.counts = key_base, value_base, counts
        self.unique = False  # whether the builder has filled the unique-id outputs
        self.rows_from = None  # (ids, nids) for ``unique_rows_into`` until it has run
        self._arrays = None

    def unique_done(self, ids, nids):
        """The builder has filled the unique ids of the batch's ``nids`` ids (``ids``, a ``BatchIds``)."""
        self.unique, self.rows_from = True, (ids, nids)

    def arrays(self):
        """Every array of the batch in ``batch_layout``'s order (parts.py), made once."""
        if self._arrays is None:
            w, buf = self.meta.tolist(), self.buf
            self._arrays = [
                np.ndarray((w[j + 1], w[j + 2]) if matrix else w[j + 1], dtype, buf, w[j])
                for j, dtype, matrix in self.builder.part_kinds
            ]
        return self._arrays

    def _parts(self):
        """``(keys, pairs, values, offsets, dense, indicators, (labels, timestamps, sid_bytes, sid_offsets))``,
        the tables' offsets, dense matrices and indicators as lists."""
        arrays, nt, nd, s = self.arrays(), self.builder.tables, len(self.builder.dense_width), self.builder.samples_at
        keys, pairs, values = arrays[:OFFSETS]
        dense_at = OFFSETS + nt
        return (
            keys,
            pairs,
            values,
            arrays[OFFSETS:dense_at],
            arrays[dense_at : dense_at + nd],
            arrays[dense_at + nd : s],
            arrays[s : s + 4],
        )

    def samples(self):
        """``(labels, timestamps, sid_bytes, sid_offsets, indicators)``."""
        *_, indicators, (labels, timestamps, sid_bytes, sid_offsets) = self._parts()
        return labels, timestamps, sid_bytes, sid_offsets, indicators

    def features(self):
        """The batch's features by name, in schema order."""
        kb, vb, c = self.key_base.tolist(), self.value_base.tolist(), self.counts.tolist()
        keys, pairs, values, offsets, dense, _, _ = self._parts()
        features = {}
        feats = [None] * len(c)  # the SparseFeatures in kernel order
        for name, is_sparse, i, t, row, is_pair in self.builder.layout:
            if is_sparse:
                ids = pairs[kb[i] : kb[i] + c[i]] if is_pair else keys[kb[i] : kb[i] + c[i]]
                features[name] = feats[i] = SparseFeature(name, ids, values[vb[i] : vb[i] + c[i]], offsets[t][row])
            else:
                features[name] = dense[i]
        if self.unique:
            # the features refer to their layout, never the layout to them: a batch dropped is freed at once
            filler = self if self.rows_from is not None else None
            unique_views(feats, self.builder.pair, self.arrays()[-3:], filler)
        return features

    def fill_rows(self):
        """Fill the unique rows and unique row offsets of the batch's features, once, on the thread that first asks
        for them.  Two threads that ask at once both compute the same values into the same places."""
        work = self.rows_from
        if work is not None:
            unique_rows_into(*work, self.builder.scratch())
            self.rows_from = None

    def span(self, table):
        """A table's features' ids (or None unless they are all int64 keys), values and offsets, each one array,
        and their names; None for a table without sparse features."""
        b = self.builder
        t, (f0, f1) = b.table_bounds[table]
        if f1 == f0:
            return None
        kb, vb, c = self.key_base, self.value_base, self.counts
        keys_end, values_end = int(kb[f1 - 1] + c[f1 - 1]), int(vb[f1 - 1] + c[f1 - 1])
        keys = self._array(KEYS)[int(kb[f0]) : keys_end] if b.keys_only[t] else None
        return keys, self._array(VALUES)[int(vb[f0]) : values_end], self._array(OFFSETS + t), b.sparse_names[t]

    def _array(self, k):
        """Part ``k``, alone when the batch's arrays are not made yet (``span`` takes three of twenty)."""
        if self._arrays is not None:
            return self._arrays[k]
        j, dtype, matrix = self.builder.part_kinds[k]
        at, rows, columns = self.meta[j : j + 3].tolist()
        return np.ndarray((rows, columns) if matrix else rows, dtype, self.buf, at)


def cut_batches(
    blocks, builder, *, split_group=True, drop_last=False, on_skip=None, rounds=None, build=None, rest=None
):
    """Yield Batches from an iterable of Blocks, each made by ``build(pieces)`` (default ``builder.build``).

    A block's rows are taken from ``blk.skip`` on; a piece ``(blk, r0, r1)`` in the stream stands for those
    rows of its block, a ``Shuffled`` one too, and the batch it ends gets the marks of its shuffle window.
    With ``split_group`` a group that does not fit is cut at the batch boundary; without
    it the group moves whole to the next batch, and a group larger than the batch size
    raises ``GroupTooLargeError`` (or goes to ``on_skip`` when given).  The last batch
    may be short; ``drop_last`` drops it, and with ``rest`` (a list) its pieces go there instead, to be
    cut again with other streams' rest.  ``FLUSH`` in the stream delivers the partial batch (or comes
    out as FLUSH when nothing is pending);
    ``rounds`` is told of every group packed whole (or skipped).  If the block stream raises, the samples
    already taken are delivered as a short batch first, then the error propagates.
    """
    size = builder.batch_size
    build = build or builder.build
    pieces = []
    filled = 0
    shuffled = None  # the Shuffled piece being cut
    taken = []  # (Shuffled piece, end row) of the pieces of the batch under way
    it = iter(blocks)

    def built(pieces):
        batch = build(pieces)
        if taken:  # the shuffle windows' batch: what it delivers is where the windows are
            batch.marks = batch_marks(taken)
            taken.clear()
        return batch

    while True:
        try:
            blk = next(it)
        except StopIteration:
            break
        except Exception:
            if pieces:
                yield built(pieces)
            raise
        if blk is FLUSH:
            if pieces:
                yield built(pieces)
                pieces, filled = [], 0
            else:
                yield FLUSH
            continue
        if isinstance(blk, Shuffled):
            shuffled, blk, r, end = blk, blk.block, blk.r0, blk.r1
        elif isinstance(blk, tuple):
            shuffled, (blk, r, end) = None, blk
        else:
            shuffled, r, end = None, blk.skip, blk.nrows  # skip: rows delivered before a restore
        ends = blk.group_offsets
        while r < end:
            need = size - filled
            if split_group:
                take = min(need, end - r)
            else:
                g = np.searchsorted(ends, min(r + need, end), side="right") - 1  # a piece ends on a group end
                take = int(ends[g]) - r
                if take <= 0:
                    if filled:
                        yield built(pieces)
                        pieces, filled = [], 0
                        continue
                    g_end = int(ends[np.searchsorted(ends, r, side="right")])
                    first_id = blk.sid_bytes[blk.sid_offsets[r] : blk.sid_offsets[r + 1]].tobytes()
                    err = GroupTooLargeError(
                        f"sample group of {g_end - r} samples is larger than batch_size={size}; "
                        f"its first sample id, in the chunk that starts at the byte offset given, is",
                        source=blk.source,
                        offset=blk.start,
                        text=first_id.decode("utf-8", "replace"),
                        expected="groups of at most batch_size samples with split_group(False)",
                    )
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
            if shuffled is not None:
                taken.append((shuffled, r + take))
            filled += take
            r += take
            if filled == size:
                yield built(pieces)
                pieces, filled = [], 0
    if rest is not None:
        rest.extend(pieces)
    elif pieces and not drop_last:
        yield built(pieces)
