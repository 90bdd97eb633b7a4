"""The DSL op stage: runs the compiled plans over each Block a parse worker produced.

Per block and plan the Python work is O(leaves): ``run_plan`` reads parsed features in
place from the block's arrays (and earlier results from their own), computes the feature
over every row of its table, and the result joins the block in a pool of DSL results
(``Block.dsl_keys``, ``Table.from_dsl``), so the parsed ids are never copied.  The block
handed on holds the features of the full schema, in schema order; hidden plans (parts
computed per aux line) feed later plans and are dropped.
"""

import dataclasses
import threading

import numpy as np

from .._native import dsl as K
from ..errors import DslLimitError
from ..blocks import Table
from .compiler import check_feature, compile_feature

__all__ = ["DslStage", "MAX_PAIRS_PER_ROW", "dsl_stage"]

# the most pairs one row of any expression may hold (a cartesian of big inputs grows as their product)
MAX_PAIRS_PER_ROW = 1 << 22


class _Result:
    """A sparse DSL result over the rows of one table: row ``r`` is ``keys/vals[off[r]:off[r + 1]]``."""

    def __init__(self, off, keys, vals):
        self.off, self.keys, self.vals = off, keys, vals


_NONE_I = np.empty(0, np.int64)
_NONE_F = np.empty(0, np.float64)
_NONE_F32 = np.empty(0, np.float32)

# where a leaf of a plan is read (DslStage._leaf_table)
_DENSE, _PARSED, _RESULT = range(3)


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
        # where each parsed feature is in a block: name -> (table, index among its kind)
        self.parsed = {}
        for t in range(raw.tables):
            self.parsed.update({s.name: (t, f) for f, s in enumerate(raw.sparse_in(t))})
            self.parsed.update({s.name: (t, d) for d, s in enumerate(raw.dense_in(t))})
        self._leaves = {plan.name: self._leaf_table(plan) for plan in plans}
        self._tables = [self._table_layout(t) for t in range(schema.tables)]
        self._arenas = threading.local()  # each parse worker's arena, kept from block to block

    def _leaf_table(self, plan):
        """The columns of ``plan``'s leaf table that are the same for every block (all but ``L_BASE``), and per leaf
        where it is read: ``(kind, name or index among its kind, table)``."""
        leaves = np.zeros((len(plan.leaves), K.LEAF_COLUMNS), np.int64)
        where = []
        for i, (name, table, width) in enumerate(plan.leaves):
            leaves[i, K.L_TABLE] = table
            leaves[i, K.L_WIDTH] = width
            if width:
                where.append((_DENSE, self.parsed[name][1], table))
            elif name in self.parsed:
                where.append((_PARSED, self.parsed[name][1], table))
            else:
                leaves[i, K.L_POOL] = 1
                where.append((_RESULT, name, table))
        return leaves, where

    def __call__(self, blk):
        refer = [tab.refer for tab in blk.tables[:-1]]
        refer_base = np.cumsum([0] + [len(r) for r in refer])
        refers = K.Refers(np.concatenate(refer) if refer else _NONE_I, refer_base, len(blk.tables))
        refers = refers.checked_when_debugging()
        results = {}
        for plan in self.plans:
            results[plan.name] = self._run(plan, blk, results, refers)
        return self._block(blk, results)

    def _run(self, plan, blk, results, refers):
        static, where = self._leaves[plan.name]
        leaves = static.copy()
        offs, dsl_keys, dsl_vals, dense = [], [], [], []
        n_off = n_dsl = n_dense = 0
        tables = blk.tables
        for i, (kind, at, table) in enumerate(where):
            if kind == _DENSE:
                col = tables[table].dense[at]
                leaves[i, K.L_BASE] = n_dense
                dense.append(col.ravel())
                n_dense += col.size
                continue
            leaves[i, K.L_BASE] = n_off
            if kind == _RESULT:
                res = results[at]
                offs.append(res.off + n_dsl)
                dsl_keys.append(res.keys)
                dsl_vals.append(res.vals)
                n_dsl += len(res.keys)
            else:
                offs.append(tables[table].sp_offsets[at])
            n_off += len(offs[-1])
        nrows = tables[plan.table].nrows
        out_off = np.empty(nrows + 1, np.int64)
        out_off[0] = 0
        out_keys = np.empty(max(64, 2 * nrows), np.int64)
        output = K.Output(out_off, out_keys, np.empty(len(out_keys), np.float64)).checked_when_debugging()
        arena = getattr(self._arenas, "arena", None)
        if arena is None:
            arena = self._arenas.arena = K.Arena(
                np.empty(1024, np.int64), np.empty(1024, np.float64)
            ).checked_when_debugging()
        inputs = K.Inputs(
            leaves,
            np.concatenate(offs) if offs else _NONE_I,
            blk.sp_keys,
            _NONE_I if blk.sp_hkeys is None else blk.sp_hkeys,
            blk.sp_values,
            np.concatenate(dsl_keys) if dsl_keys else _NONE_I,
            np.concatenate(dsl_vals) if dsl_vals else _NONE_F,
            np.concatenate(dense).astype(np.float64) if dense else _NONE_F,
        ).checked_when_debugging()
        row = out_n = 0
        while True:
            status, row, need, out_n = K.run_plan(
                plan.program, inputs, refers, plan.table, row, nrows, arena, output, out_n, self.limit
            )
            if status == K.DONE:
                break
            if status == K.TOO_MANY:
                raise self._too_many(plan, blk, row, need)
            size = max(2 * len(arena.akeys if status == K.GROW_ARENA else output.out_keys), need)
            if status == K.GROW_ARENA:
                arena = self._arenas.arena = K.Arena(
                    np.empty(size, np.int64), np.empty(size, np.float64)
                ).checked_when_debugging()
            else:
                output = output._replace(
                    out_keys=np.concatenate([output.out_keys[:out_n], np.empty(size - out_n, np.int64)]),
                    out_vals=np.concatenate([output.out_vals[:out_n], np.empty(size - out_n, np.float64)]),
                )
        if plan.dense:  # single-valued: exactly one pair per row
            return output.out_vals[:nrows].astype(np.float32).reshape(nrows, 1)
        return _Result(out_off, output.out_keys[:out_n], output.out_vals[:out_n])

    def _too_many(self, plan, blk, row, need):
        if plan.table == 0:
            sid = blk.sid_bytes[blk.sid_offsets[row] : blk.sid_offsets[row + 1]].tobytes().decode("utf-8", "replace")
            where = f"sample {row} of the chunk (sample id {sid!r})"
        else:
            where = f"aux line {row} of table {plan.table} of the chunk"
        name = plan.name.split("#")[0]
        return DslLimitError(
            f"feature {name!r}: one row's result would hold {need:,} pairs, at {where}; the value is",
            source=blk.source,
            offset=blk.start,
            text=str(need),
            feature=name,
            expected=f"at most {self.limit:,} pairs per row (a cartesian of big inputs?)",
        )

    def _block(self, blk, results):
        """The block with every feature of the schema: parsed columns in place, DSL ones in the DSL pool."""
        keys, vals = [], []
        n_pool = 0
        tables = []
        for tab, (sparse, dense, from_dsl) in zip(blk.tables, self._tables):
            if sparse is None and dense is None:
                tables.append(tab)
                continue
            offsets = tab.sp_offsets
            if sparse is not None:
                rows = []
                for at in sparse:
                    if isinstance(at, int):
                        rows.append(tab.sp_offsets[at])
                        continue
                    res = results[at]
                    rows.append(res.off + n_pool)
                    keys.append(res.keys)
                    vals.append(res.vals)
                    n_pool += len(res.keys)
                offsets = np.stack(rows)
            if dense is not None:
                dense = tuple(tab.dense[at] if isinstance(at, int) else results[at] for at in dense)
            tables.append(Table(tab.nrows, offsets, tab.dense if dense is None else dense, tab.refer, from_dsl))
        return dataclasses.replace(
            blk,
            tables=tuple(tables),
            dsl_keys=np.concatenate(keys) if keys else _NONE_I,
            dsl_values=np.concatenate(vals).astype(np.float32) if vals else _NONE_F32,
        )

    def _table_layout(self, t):
        """Where ``_block`` takes table ``t``'s features from: ``(sparse, dense, from_dsl)``, per sparse and per
        dense feature (schema order) its index among the parsed ones or the name of its DSL result, each None when
        the table has no DSL feature of that kind (its parsed ones are then all of them, in order)."""

        def sources(specs):
            at = [self.parsed[s.name][1] if s.name in self.parsed else s.name for s in specs]
            return at if any(isinstance(a, str) for a in at) else None

        sparse, dense = sources(self.schema.sparse_in(t)), sources(self.schema.dense_in(t))
        from_dsl = None if sparse is None else np.array([isinstance(a, str) for a in sparse], np.bool_)
        return sparse, dense, from_dsl


def dsl_stage(schema):
    """The op stage computing the schema's DSL features, or None when there are none."""
    specs = {s.name: s for s in schema.specs}
    plans = []
    for spec in schema.specs:
        if spec.dsl is not None:
            plans += compile_feature(spec, check_feature(spec, specs), specs)
    return DslStage(schema, schema.raw, plans) if plans else None
