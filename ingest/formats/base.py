"""What every format front end shares: opening a work unit, and the read buffer it parses from."""

import threading
import time

import numpy as np

from .._native.columns import BlockParts, Columns, KeptLayout, region_decoded, region_room, trim_rows
from ..blocks import Block
from ..sources import read_into

__all__ = ["UnitFormat", "ReadClock", "Kept", "KeptRows", "Room", "chunk_block", "refill", "grown", "whole_so_far"]


class Kept:
    """What a format's reads of units on one thread pass on to the next: its read buffer and kernel outputs.  Fresh
    arrays cost the first touch of their pages, about 0.2 ms a unit: pb in units of 1 MiB read 12 % slower.  A read
    ``take()``s them (None when none are kept, or another read of the thread holds them) and ``keep()``s them when it
    ends."""

    def __init__(self):
        self._local = threading.local()

    def take(self):
        kept = getattr(self._local, "kept", None)
        self._local.kept = None
        return kept

    def keep(self, kept):
        self._local.kept = kept


class KeptRows:
    """What a format's Blocks keep of a chunk, the same for every chunk: ``sparse`` (per table, the indices of its
    sparse features among the chunk's), their ``cutoff`` (per table, as ``sparse``), ``dense_cols`` (a row
    ``(table, first column, width)`` a dense feature, in table order) and ``label_count`` labels a sample."""

    def __init__(self, sparse, cutoff, dense_cols, label_count):
        self.label_count = label_count
        self.table_features = [len(feats) for feats in sparse]
        self.dense_list = dense_cols.tolist()
        self.layout = (
            KeptLayout(
                np.concatenate([np.empty(0, np.int64), *sparse]).astype(np.int64),
                np.concatenate([np.empty(0, np.int64), *cutoff]).astype(np.int64),
                np.array(self.table_features, np.int64),
                dense_cols,
            )
            .checked()
            .plain()
        )

    def of(self, tab_rows, rows, cols, high, nsid, ngroups, start):
        """What a Block keeps of a chunk of ``tab_rows`` rows in each table (a list), from ``rows`` (the
        ``ChunkRows`` of a parser's scratch, its ``tab_rows`` set) and ``cols`` (its ``Columns``; ``high``: its high
        ids too), both plain, in arrays of its own, by one ``trim_rows`` call: ``(parts, offsets, dense, refers)``,
        the ``BlockParts`` of its samples (the rows of table 0), ``nsid`` sample-id bytes and ``ngroups`` groups at
        ``start`` of the source, every table's sparse offsets ``[F_t, rows + 1]``, every dense feature's
        ``[rows, width]`` matrix and the refer of every table but the last."""
        nrows = tab_rows[0]
        # plain loops, no comprehensions: a Python call costs ~1 us here, where the Python runs cold between kernels
        offsets_at = [0]
        for nf, n in zip(self.table_features, tab_rows):
            offsets_at.append(offsets_at[-1] + nf * (n + 1))
        dense_at = [0]
        for t, _, w in self.dense_list:
            dense_at.append(dense_at[-1] + tab_rows[t] * w)
        refer_at = [0]
        for n in tab_rows[:-1]:
            refer_at.append(refer_at[-1] + n)
        parts = BlockParts(
            np.empty(offsets_at[-1], np.int64),
            np.array(offsets_at, np.int64),
            np.empty(dense_at[-1], np.float32),
            np.array(dense_at, np.int64),
            np.empty(refer_at[-1], np.int64),
            np.array(refer_at, np.int64),
            np.empty((nrows, self.label_count), np.float32),
            np.empty(nrows, np.int64),
            np.empty(nsid, np.uint8),
            np.empty(nrows + 1, np.int64),
            np.empty(ngroups + 1, np.int64),
            np.empty(ngroups, np.int64),
        ).checked_when_debugging()
        trim_rows(rows, cols, high, self.layout, start, parts.plain())
        offsets, dense, refers = [], [], []
        for t, nf in enumerate(self.table_features):
            offsets.append(parts.offsets[offsets_at[t] : offsets_at[t + 1]].reshape(nf, tab_rows[t] + 1))
            if t < len(refer_at) - 1:
                refers.append(parts.refer[refer_at[t] : refer_at[t + 1]])
        for k, (t, _, w) in enumerate(self.dense_list):
            dense.append(parts.dense[dense_at[k] : dense_at[k + 1]].reshape(tab_rows[t], w))
        return parts, offsets, dense, refers


def chunk_block(tables, parts, cols, high, unit, start, end):
    """The Block of a chunk's ``tables`` (Table), ``parts`` (what ``KeptRows.of`` kept) and ``cols`` (its
    ``Columns``; ``high``: their high ids are kept) of ``unit``'s bytes ``start:end``."""
    return Block(
        tables=tables,
        group_offsets=parts.group_offsets,
        sp_keys=cols.keys,
        sp_hkeys=cols.hkeys if high else None,
        sp_values=cols.values,
        labels=parts.labels,
        timestamps=parts.timestamps,
        sid_bytes=parts.sid_bytes,
        sid_offsets=parts.sid_offsets,
        source=unit.url,
        start=start,
        end=end,
        group_pos=parts.group_pos,
    )


class Room:
    """How many ids each sparse feature's region of a chunk's columns holds (``columns.Columns``), from the ids a
    byte seen so far in the unit, with a fifth more and ``SPARE`` to spare (``region_room``).  Too small a region
    only cuts a block short (a FULL status); the sample that did not fit then gets the most a chunk can hold (a
    value takes ``value_bytes`` or more).  Before any id is seen, every feature gets an even share of that most.
    ``high_keys``: the format has 128-bit ids, and the columns an array of their high words."""

    SPARE = 64

    def __init__(self, nsparse, value_bytes, high_keys):
        self.value_bytes = value_bytes
        self.high_keys = high_keys
        self.ids = np.zeros(nsparse, np.int64)
        self.bytes = 0
        self.floor = np.zeros(nsparse, np.int64)
        # where each region starts, ends and is filled up to: a chunk's, reused (its Block keeps none of them)
        self.first, self.cur, self.lim = (np.empty(nsparse, np.int64) for _ in range(3))

    def columns(self, filled):
        """The ``Columns`` for parsing ``filled`` bytes: their ``keys``, ``hkeys`` and ``values`` are the arrays
        the chunk's Block keeps."""
        total = region_room(
            self.ids, self.bytes, filled, self.value_bytes, self.floor, self.SPARE, self.first, self.cur, self.lim
        )
        keys = np.empty(total, np.int64)
        hkeys = np.empty(total if self.high_keys else 0, np.int64)
        values = np.empty(total, np.float32)
        return Columns(keys, hkeys, values, self.first, self.cur, self.lim).checked_when_debugging()

    def decoded(self, consumed):
        region_decoded(self.ids, self.first, self.cur, self.floor, consumed)
        self.bytes += consumed

    def too_small(self, feature, filled):
        self.floor[feature] = filled // self.value_bytes + 1


class ReadClock:
    """Seconds spent reading (or waiting for read-ahead), added up by ``refill``; ``take()`` hands them over."""

    def __init__(self):
        self.seconds = 0.0

    def take(self):
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def refill(f, buf, filled, limit=None, clock=None):
    """Read into ``buf[filled:]`` until it is full, holds ``limit`` bytes, or the stream ends.

    Returns ``(filled, eof)``.  The time it takes is added to ``clock`` (a ``ReadClock``) when given.
    """
    t0 = time.perf_counter()
    stop = len(buf) if limit is None else min(len(buf), limit)
    eof = False
    live = getattr(f, "live", False)  # a UnitStream without end: parse what has arrived (no ABC isinstance: ~1 us)
    while filled < stop:
        n = read_into(f, memoryview(buf)[filled:stop])
        if n == 0:
            eof = True
            break
        filled += n
        if live and filled < stop:
            break
    else:
        eof = limit is not None and filled >= limit
    if clock is not None:
        clock.seconds += time.perf_counter() - t0
    return filled, eof


class UnitFormat:
    """A front end turns work units into Blocks; subclasses implement ``read_stream(f, unit, stop, clock)``."""

    splittable = False

    def read_unit(self, unit, stop=None, clock=None, opened=None):
        """Yield the Blocks of one work unit; skipped errors go to ``on_skip``, others raise.  The time spent
        reading is added to ``clock`` (a ``ReadClock``) when given.  ``opened``: the unit's stream opened ahead
        (``pipeline.stages.Opened``), or None to open it here."""
        f = unit.open() if opened is None else opened.stream()
        f.stop = stop
        try:
            for blk in self.read_stream(f, unit, stop, clock):
                blk.messages = f.positions(blk.start, blk.end)
                yield blk
        finally:
            f.close()

    def read_stream(self, f, unit, stop, clock=None):
        """The Blocks of the stream ``f`` of ``unit`` (opened, positioned where the unit resumes)."""
        raise NotImplementedError


def grown(buf, filled, need=0):
    """A buffer twice as large as ``buf`` (at least ``need`` bytes) starting with ``buf[:filled]``."""
    bigger = np.empty(max(2 * len(buf), need), np.uint8)
    bigger[:filled] = buf[:filled]
    return bigger


def whole_so_far(f, eof):
    """Whether the bytes read so far end with whole groups: at the end, or where a live stream's message ends."""
    return eof or f.at_boundary()
