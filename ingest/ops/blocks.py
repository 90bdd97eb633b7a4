"""Block surgery for the ops and the group shuffle: keep some rows, replace one sparse column, join blocks.

Every function returns a new Block built with ``dataclasses.replace``, so the fields the
pipeline adds (positions, unit, Kafka messages) travel along; per call the Python work is
O(tables), the copies are numba kernels or numpy.
"""

import dataclasses

import numpy as np

from .._native.ops import gather_csr, kept_groups
from ..blocks import Table

__all__ = ["take_rows", "take_ranges", "replace_sparse", "concat_blocks", "check_parsed_only"]


def check_parsed_only(blk):
    """Ops run on parsed blocks, before the DSL stage adds its pool; anything else is a wiring bug."""
    if any(tab.from_dsl is not None for tab in blk.tables):
        raise AssertionError("ops must run before the DSL stage: this block already holds DSL features")


def _csr_layout(lengths, base):
    """Offsets ``[F, m + 1]`` of rows of ``lengths`` (``[F, m]``) laid feature after feature from ``base``;
    and the end."""
    nfeat, m = lengths.shape
    starts = np.empty(nfeat * m + 1, np.int64)
    starts[0] = base
    np.cumsum(lengths.ravel(), out=starts[1:])
    starts[1:] += base
    index = np.arange(nfeat, dtype=np.int64)[:, None] * m + np.arange(m + 1, dtype=np.int64)[None, :]
    return starts[index], int(starts[-1])


def _row_lengths(offsets, rows):
    return offsets[:, rows + 1] - offsets[:, rows]


def take_rows(blk, keep_row):
    """The block without the table-0 rows where ``keep_row`` (bool ``[nrows]``) is False.

    A group left without rows is dropped.  Aux tables keep every line (their ``refer``
    numbering is unchanged, so indicators stay right); the sparse pool is compacted.
    """
    check_parsed_only(blk)
    ngroups = len(blk.group_offsets) - 1
    group_offsets = np.empty(ngroups + 1, np.int64)
    groups = np.empty(ngroups, np.int64)
    ng = kept_groups(blk.group_offsets, keep_row, group_offsets, groups)
    return _take(blk, np.flatnonzero(keep_row).astype(np.int64), group_offsets[: ng + 1], groups[:ng])


def take_ranges(blk, starts, ends):
    """A block whose group ``k`` is the table-0 rows ``starts[k]:ends[k]`` of ``blk`` (each within one of its
    groups), in the order given; aux tables as in ``take_rows``."""
    check_parsed_only(blk)
    lengths = ends - starts
    group_offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=group_offsets[1:])
    rows = np.repeat(starts - group_offsets[:-1], lengths) + np.arange(group_offsets[-1], dtype=np.int64)
    groups = np.searchsorted(blk.group_offsets, starts, side="right") - 1
    return _take(blk, rows, group_offsets, groups)


def _take(blk, rows, group_offsets, groups):
    """The block of table-0 rows ``rows`` of ``blk``, in groups ``group_offsets`` that were its groups
    ``groups``."""
    picks = [rows] + [np.arange(tab.nrows, dtype=np.int64) for tab in blk.tables[1:]]
    layouts, end = [], 0
    for tab, pick in zip(blk.tables, picks):
        layout, end = _csr_layout(_row_lengths(tab.sp_offsets, pick), end)
        layouts.append(layout)
    keys = np.empty(end, np.int64)
    values = np.empty(end, np.float32)
    hkeys = None if blk.sp_hkeys is None else np.empty(end, np.int64)
    tables = []
    for t, (tab, pick, layout) in enumerate(zip(blk.tables, picks, layouts)):
        gather_csr(tab.sp_offsets, pick, blk.sp_keys, layout, keys)
        gather_csr(tab.sp_offsets, pick, blk.sp_values, layout, values)
        if hkeys is not None:
            gather_csr(tab.sp_offsets, pick, blk.sp_hkeys, layout, hkeys)
        dense, refer = tab.dense, tab.refer
        if t == 0:
            dense = tuple(d[pick] for d in dense)
            refer = None if refer is None else refer[pick]
        tables.append(Table(len(pick), layout, dense, refer))
    sid_offsets, nsid = _csr_layout(_row_lengths(blk.sid_offsets[None, :], rows), 0)
    sid_bytes = np.empty(nsid, np.uint8)
    gather_csr(blk.sid_offsets[None, :], rows, blk.sid_bytes, sid_offsets, sid_bytes)
    extra = {}
    if getattr(blk, "group_pos", None) is not None:
        extra["group_pos"] = blk.group_pos[groups]
    return dataclasses.replace(
        blk,
        tables=tuple(tables),
        group_offsets=group_offsets,
        sp_keys=keys,
        sp_hkeys=hkeys,
        sp_values=values,
        labels=blk.labels[rows],
        timestamps=blk.timestamps[rows],
        sid_bytes=sid_bytes,
        sid_offsets=sid_offsets[0],
        **extra,
    )


def replace_sparse(blk, table, feature, offsets, keys, values):
    """The block with sparse feature ``feature`` (index among its table's) of ``table`` replaced.

    ``offsets`` (int64 ``[nrows + 1]``, from 0) lay out ``keys``/``values``; they join the
    end of the pool (the old values of the column stay there, unreferenced).
    """
    check_parsed_only(blk)
    base = len(blk.sp_keys)
    tab = blk.tables[table]
    sp_offsets = tab.sp_offsets.copy()
    sp_offsets[feature] = offsets + base
    tables = list(blk.tables)
    tables[table] = dataclasses.replace(tab, sp_offsets=sp_offsets)
    hkeys = None if blk.sp_hkeys is None else np.concatenate([blk.sp_hkeys, np.zeros(len(keys), np.int64)])
    return dataclasses.replace(
        blk,
        tables=tuple(tables),
        sp_keys=np.concatenate([blk.sp_keys, keys]),
        sp_values=np.concatenate([blk.sp_values, values]),
        sp_hkeys=hkeys,
    )


def _pools(blk, tab):
    """``(features, keys, values, hkeys)`` of each pool the sparse features of ``tab`` point into: the block's, and
    the DSL stage's (``Table.from_dsl``) when it has any."""
    if tab.from_dsl is None:
        return [(slice(None), blk.sp_keys, blk.sp_values, blk.sp_hkeys)]
    return [
        (~tab.from_dsl, blk.sp_keys, blk.sp_values, blk.sp_hkeys),
        (tab.from_dsl, blk.dsl_keys, blk.dsl_values, None),
    ]


def concat_blocks(blocks):
    """One Block holding the groups of ``blocks`` (same schema) in order, the DSL stage's features moved into its
    own pool; fields not listed come from the first."""
    if len(blocks) == 1 and all(tab.from_dsl is None for tab in blocks[0].tables):
        return blocks[0]
    first = blocks[0]
    ntables = len(first.tables)
    row_base = [np.cumsum([0] + [b.tables[t].nrows for b in blocks]) for t in range(ntables)]
    lengths = [
        np.concatenate([np.diff(b.tables[t].sp_offsets, axis=1) for b in blocks], axis=1) for t in range(ntables)
    ]
    end = 0
    layouts = []
    for t in range(ntables):  # feature after feature over all blocks' rows, as one parsed table would be
        layout, end = _csr_layout(lengths[t], end)
        layouts.append(layout)
    keys = np.empty(end, np.int64)
    values = np.empty(end, np.float32)
    any_h = any(b.sp_hkeys is not None for b in blocks)
    hkeys = np.zeros(end, np.int64) if any_h else None
    tables = []
    for t in range(ntables):
        for i, b in enumerate(blocks):
            tab = b.tables[t]
            rows = np.arange(tab.nrows, dtype=np.int64)
            dst = layouts[t][:, row_base[t][i] : row_base[t][i] + tab.nrows + 1]
            for features, pool_keys, pool_values, pool_hkeys in _pools(b, tab):
                offsets, into = tab.sp_offsets[features], dst[features]
                gather_csr(offsets, rows, pool_keys, into, keys)
                gather_csr(offsets, rows, pool_values, into, values)
                if pool_hkeys is not None:
                    gather_csr(offsets, rows, pool_hkeys, into, hkeys)
        parts = [b.tables[t] for b in blocks]
        dense = tuple(np.concatenate(cols) for cols in zip(*(p.dense for p in parts)))
        refer = None
        if t < ntables - 1:
            refer = np.concatenate([p.refer + row_base[t + 1][i] for i, p in enumerate(parts)])
        tables.append(Table(int(row_base[t][-1]), layouts[t], dense, refer))
    rows0 = row_base[0]
    group_offsets = np.concatenate([b.group_offsets[:-1] + rows0[i] for i, b in enumerate(blocks)] + [rows0[-1:]])
    sid_base = np.cumsum([0] + [len(b.sid_bytes) for b in blocks])
    sid_offsets = np.concatenate([b.sid_offsets[:-1] + sid_base[i] for i, b in enumerate(blocks)] + [sid_base[-1:]])
    extra = {}
    if getattr(first, "group_pos", None) is not None:
        extra["group_pos"] = np.concatenate([b.group_pos for b in blocks])
    return dataclasses.replace(
        first,
        tables=tuple(tables),
        group_offsets=group_offsets.astype(np.int64),
        sp_keys=keys,
        sp_hkeys=hkeys,
        sp_values=values,
        labels=np.concatenate([b.labels for b in blocks]),
        timestamps=np.concatenate([b.timestamps for b in blocks]),
        sid_bytes=np.concatenate([b.sid_bytes for b in blocks]),
        sid_offsets=sid_offsets.astype(np.int64),
        dsl_keys=None,
        dsl_values=None,
        end=blocks[-1].end,
        **extra,
    )
