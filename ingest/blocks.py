"""Block: the columnar result of parsing one chunk of one work unit, what every stage after the parse passes on."""

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Block", "Table", "empty_aux_tables", "placeholder_block"]


@dataclass(eq=False)
class Table:
    """The rows of one table of a block: one per sample for table 0, aux lines for tables 1..

    Attributes
    ----------
    nrows : int
    sp_offsets : int64 [F_t, nrows + 1]
        Per sparse feature of this table (schema order), absolute positions into the
        block's ``sp_keys``/``sp_values``: feature ``f`` row ``r`` is
        ``sp_offsets[f, r]:sp_offsets[f, r + 1]``.
    dense : tuple of float32 [nrows, width]
        One array per dense feature of this table (schema order), masked already.
    refer : int64 [nrows] or None
        Row of the next table (in this block) each row refers to; None for the last table.
    from_dsl : bool [F_t] or None
        Features computed by the DSL stage, whose offsets point into the block's
        ``dsl_keys``/``dsl_values`` instead; None when there are none.
    """

    nrows: int
    sp_offsets: np.ndarray
    dense: tuple
    refer: object = None
    from_dsl: object = None


@dataclass(eq=False)
class Block:
    """Whole sample groups of one chunk, column by column, owned by the block.

    Attributes
    ----------
    tables : tuple of Table
        One per table of the schema; ``tables[0]`` has one row per sample.
    group_offsets : int64 [G + 1]
        First sample (row of table 0) of each group, then ``nrows``.  Groups never span
        blocks, and the rows of other tables a group refers to are in the same block.
    sp_keys : int64 [T]
    sp_hkeys : int64 [T] or None
        High 64 bits of 128-bit ids; None when all are 0.
    sp_values : float32 [T]
    dsl_keys : int64 [D], dsl_values : float32 [D], or None
        Sparse features computed by the DSL stage (``Table.from_dsl``).
    labels : float32 [nrows, label_count]
    timestamps : int64 [nrows]
    sid_bytes : uint8 [S], sid_offsets : int64 [nrows + 1]
        Sample ids, row ``r`` is ``sid_bytes[sid_offsets[r]:sid_offsets[r + 1]]``.
    source : str
        URL of the work unit.
    start, end : int
        Byte range of the source this block was parsed from.
    group_pos : int64 [G]
        Position in the unit's stream of each group's first byte: where a restored reader
        starts again (``end`` is the position after the last group).
    unit : tuple
        ``(epoch, unit index)``, set by the pipeline.
    skip : int
        Rows at the head of the block already delivered before a restore (set by the pipeline
        on the first block of a resumed unit); the batcher passes over them.
    messages : (int64 [M], int64 [M]) or None
        Kafka: the stream position where each message overlapping the block starts, and its
        offset, to turn ``group_pos`` into (message offset, byte in message).
    parsed : Block or None
        With ``keep_sample``: this block before the DSL stage, what goes through the ops again.
    batch_args : PieceSource or None
        The batcher's: the block's arrays as its kernels take them, made once per block.
    nrows, nbytes : int
        Its samples (the rows of table 0) and ``end - start``, set when it is made: a Block's tables and byte range
        are never changed afterwards (``dataclasses.replace`` makes another).
    """

    tables: tuple
    group_offsets: np.ndarray
    sp_keys: np.ndarray
    sp_hkeys: object
    sp_values: np.ndarray
    labels: np.ndarray
    timestamps: np.ndarray
    sid_bytes: np.ndarray
    sid_offsets: np.ndarray
    source: str = ""
    start: int = 0
    end: int = 0
    dsl_keys: object = None
    dsl_values: object = None
    group_pos: object = None
    unit: tuple = (0, 0)
    skip: int = 0
    messages: object = None
    parsed: object = None
    batch_args: object = field(default=None, init=False, repr=False)  # not carried over by replace()

    def __post_init__(self):
        # plain attributes, not properties: the pipeline reads them several times a block, a Python call each
        self.nrows = self.tables[0].nrows
        self.nbytes = self.end - self.start

    def position(self, row):
        """``(position, rows)`` after delivering the rows before ``row``: the start of the group holding
        ``row`` and how many of its rows came before; ``(end, 0)`` when ``row`` is past the last."""
        if row >= self.nrows:
            return self._located(self.end), 0
        # the array's method and item(): half the time of np.searchsorted and int(), every batch
        g = self.group_offsets.searchsorted(row, "right") - 1
        return self._located(self.group_pos.item(g)), row - self.group_offsets.item(g)

    def _located(self, pos):
        if self.messages is None:
            return pos
        starts, offsets = self.messages
        i = starts.searchsorted(pos, "right") - 1
        return offsets.item(i), pos - starts.item(i)


def empty_aux_tables(schema, group_offsets, end):
    """Tables 1.. for data without aux lines (text, ``spb``): one empty line per group.

    Every sample of a group refers to its group's line, so indicators stay valid and
    aux features come out empty (sparse) or zero (dense), as in XDL.  ``end`` is the
    position in the block's sparse arrays that the empty rows point at.
    """
    groups = len(group_offsets) - 1
    tables = []
    for t in range(1, schema.tables):
        offsets = np.full((len(schema.sparse_in(t)), groups + 1), end, np.int64)
        dense = tuple(np.zeros((groups, s.width), np.float32) for s in schema.dense_in(t))
        refer = np.arange(groups, dtype=np.int64) if t < schema.tables - 1 else None
        tables.append(Table(groups, offsets, dense, refer))
    refer0 = None
    if schema.tables > 1:
        refer0 = np.repeat(np.arange(groups, dtype=np.int64), np.diff(group_offsets))
    return refer0, tables


def placeholder_block(schema):
    """A Block of one sample (one row in every table of ``schema``, empty sparse rows), whose arrays have the
    types the formats give theirs: what a kernel warmer (``ingest.warmup``) runs a kernel on to compile it."""
    tables = []
    for t in range(schema.tables):
        refer = np.zeros(1, np.int64) if t < schema.tables - 1 else None
        dense = tuple(np.zeros((1, s.width), np.float32) for s in schema.dense_in(t))
        tables.append(Table(1, np.zeros((len(schema.sparse_in(t)), 2), np.int64), dense, refer))
    return Block(
        tables=tuple(tables),
        group_offsets=np.array([0, 1], np.int64),
        sp_keys=np.zeros(0, np.int64),
        sp_hkeys=None,
        sp_values=np.zeros(0, np.float32),
        labels=np.zeros((1, schema.label_count), np.float32),
        timestamps=np.zeros(1, np.int64),
        sid_bytes=np.zeros(0, np.uint8),
        sid_offsets=np.zeros(2, np.int64),
    )
