"""The DSL op stage: runs the compiled plans over each Block a parse worker produced.

Per block and plan the Python work is O(leaves): the leaves' CSR slices are gathered
into one pool, ``run_plan`` computes the feature over every row of its table, and the
result joins the block's columns.  The block handed on holds the features of the full
schema, in schema order; hidden plans (parts computed per aux line) feed later plans
and are dropped.
"""
import dataclasses

import numpy as np

from .._native import dsl as K
from ..errors import DslLimitError
from ..pipeline.block import Table

__all__ = ["DslStage", "MAX_PAIRS_PER_ROW"]

# the most pairs one row of any expression may hold (a cartesian of big inputs grows as their product)
MAX_PAIRS_PER_ROW = 1 << 22


class _Sparse:
    """A sparse column of a block: row ``r`` is ``keys/vals/hkeys[off[r] - off[0] : off[r + 1] - off[0]]``."""

    def __init__(self, off, keys, vals, hkeys):
        self.off, self.keys, self.vals, self.hkeys = off, keys, vals, hkeys


class DslStage:
    """Applies ``plans`` (from ``compile_feature``, in dependency order) to Blocks of ``raw`` features.

    Parameters
    ----------
    schema : Schema
        Every declared feature; the blocks handed on follow it.
    raw : Schema
        The features the format parses (``schema`` without DSL features).
    plans : list of Plan
    limit : int
        Most pairs one row of an expression may produce (``DslLimitError`` beyond).
    """

    def __init__(self, schema, raw, plans, limit=None):
        self.schema = schema
        self.raw = raw
        self.plans = plans
        self.limit = MAX_PAIRS_PER_ROW if limit is None else limit

    def __call__(self, blk):
        cols = {}
        for t, tab in enumerate(blk.tables):
            for f, spec in enumerate(self.raw.sparse_in(t)):
                off = tab.sp_offsets[f]
                a, b = off[0], off[-1]
                cols[spec.name] = _Sparse(off, blk.sp_keys[a:b], blk.sp_values[a:b],
                                          None if blk.sp_hkeys is None else blk.sp_hkeys[a:b])
            for d, spec in enumerate(self.raw.dense_in(t)):
                cols[spec.name] = tab.dense[d]
        refer = [tab.refer for tab in blk.tables[:-1]]
        refer_base = np.cumsum([0] + [len(r) for r in refer])
        refer_flat = np.concatenate(refer) if refer else np.empty(0, np.int64)
        for plan in self.plans:
            cols[plan.name] = self._run(plan, blk, cols, refer_flat, refer_base)
        return self._block(blk, cols)

    def _run(self, plan, blk, cols, refer_flat, refer_base):
        leaves = np.zeros((len(plan.leaves), 3), np.int64)
        offs, keys, vals, hkeys, dense = [], [], [], [], []
        n_off = n_pool = n_dense = 0
        with_h = blk.sp_hkeys is not None
        for i, (name, table, width) in enumerate(plan.leaves):
            col = cols[name]
            leaves[i, K.L_TABLE] = table
            leaves[i, K.L_WIDTH] = width
            if width:
                leaves[i, K.L_BASE] = n_dense
                dense.append(col.ravel())
                n_dense += col.size
                continue
            leaves[i, K.L_BASE] = n_off
            offs.append(col.off - col.off[0] + n_pool)
            keys.append(col.keys)
            vals.append(col.vals)
            if with_h:
                hkeys.append(col.hkeys if col.hkeys is not None else np.zeros(len(col.keys), np.int64))
            n_off += len(col.off)
            n_pool += len(col.keys)
        leaf_off = np.concatenate(offs) if offs else np.empty(0, np.int64)
        pool_keys = np.concatenate(keys) if keys else np.empty(0, np.int64)
        pool_vals = np.concatenate(vals).astype(np.float64) if vals else np.empty(0, np.float64)
        pool_hkeys = np.concatenate(hkeys) if hkeys else np.empty(0, np.int64)
        dense_flat = np.concatenate(dense).astype(np.float64) if dense else np.empty(0, np.float64)
        nrows = blk.tables[plan.table].nrows
        out_off = np.empty(nrows + 1, np.int64)
        out_off[0] = 0
        out_keys = np.empty(max(64, 2 * nrows), np.int64)
        out_vals = np.empty(len(out_keys), np.float64)
        akeys = np.empty(1024, np.int64)
        avals = np.empty(1024, np.float64)
        row = out_n = 0
        while True:
            status, row, need, out_n = K.run_plan(
                plan.ops, plan.consts, plan.out_reg, plan.nregs, leaves, leaf_off, pool_keys, pool_hkeys, pool_vals,
                dense_flat, refer_flat, refer_base, plan.table, len(blk.tables), row, nrows, akeys, avals,
                out_off, out_keys, out_vals, out_n, self.limit)
            if status == K.DONE:
                break
            if status == K.TOO_MANY:
                raise self._too_many(plan, blk, row, need)
            size = max(2 * len(akeys if status == K.GROW_ARENA else out_keys), need)
            if status == K.GROW_ARENA:
                akeys, avals = np.empty(size, np.int64), np.empty(size, np.float64)
            else:
                out_keys = np.concatenate([out_keys[:out_n], np.empty(size - out_n, np.int64)])
                out_vals = np.concatenate([out_vals[:out_n], np.empty(size - out_n, np.float64)])
        if plan.dense:  # single-valued: exactly one pair per row
            return out_vals[:nrows].astype(np.float32).reshape(nrows, 1)
        return _Sparse(out_off, out_keys[:out_n], out_vals[:out_n], None)

    def _too_many(self, plan, blk, row, need):
        if plan.table == 0:
            sid = blk.sid_bytes[blk.sid_offsets[row]:blk.sid_offsets[row + 1]].tobytes().decode("utf-8", "replace")
            where = f"sample {row} of the chunk (sample id {sid!r})"
        else:
            where = f"aux line {row} of table {plan.table} of the chunk"
        name = plan.name.split("#")[0]
        return DslLimitError(f"feature {name!r}: one row's result would hold {need:,} pairs, at {where}; the value is",
                             source=blk.source, offset=blk.start, text=str(need), feature=name,
                             expected=f"at most {self.limit:,} pairs per row (a cartesian of big inputs?)")

    def _block(self, blk, cols):
        """The block with every feature of the schema: raw columns kept in place, DSL ones appended."""
        keys, vals, hkeys = [blk.sp_keys], [blk.sp_values], [blk.sp_hkeys]
        n_pool = len(blk.sp_keys)
        tables = []
        for t, tab in enumerate(blk.tables):
            raw_pos = {s.name: f for f, s in enumerate(self.raw.sparse_in(t))}
            rows = []
            for spec in self.schema.sparse_in(t):
                if spec.name in raw_pos:
                    rows.append(tab.sp_offsets[raw_pos[spec.name]])
                    continue
                col = cols[spec.name]
                rows.append(col.off + n_pool)
                keys.append(col.keys)
                vals.append(col.vals.astype(np.float32))
                if blk.sp_hkeys is not None:
                    hkeys.append(np.zeros(len(col.keys), np.int64))
                n_pool += len(col.keys)
            offsets = np.stack(rows) if rows else np.empty((0, tab.nrows + 1), np.int64)
            raw_dense = {s.name: d for d, s in enumerate(self.raw.dense_in(t))}
            dense = tuple(tab.dense[raw_dense[s.name]] if s.name in raw_dense else cols[s.name]
                          for s in self.schema.dense_in(t))
            tables.append(Table(tab.nrows, offsets, dense, tab.refer))
        return dataclasses.replace(
            blk, tables=tuple(tables), sp_keys=np.concatenate(keys), sp_values=np.concatenate(vals),
            sp_hkeys=None if blk.sp_hkeys is None else np.concatenate(hkeys))
