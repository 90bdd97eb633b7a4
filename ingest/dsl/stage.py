"""The DSL op stage: runs the compiled plans over each Block a parse worker produced.

The plans of every DSL feature are fused once (``K.fuse``) and run over a block in one kernel call
(``run_plans``), which reads parsed features in place from the block's arrays and earlier plans' results from
the pool it writes every result into.  That pool becomes the block's pool of DSL results (``Block.dsl_keys``,
``Table.from_dsl``), so the parsed ids are never copied.  Per block the Python work is O(leaves).  The block
handed on holds the features of the full schema, in schema order; hidden plans (parts computed per aux line)
feed later plans and no feature points at their results.
"""

import collections
import dataclasses
import threading

import numpy as np

from .._native import dsl as K
from ..errors import ConfigError, DslLimitError
from ..blocks import Table
from .compiler import HIDDEN_MARK, check_feature, compile_feature

__all__ = ["DslStage", "MAX_PAIRS_PER_ROW", "dsl_stage"]

# the most pairs one row of any expression may hold (a cartesian of big inputs grows as their product)
MAX_PAIRS_PER_ROW = 1 << 22

_NONE_I = np.empty(0, np.int64)
_NONE_F = np.empty(0, np.float64)


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
        self._plan_of = {plan.name: p for p, plan in enumerate(plans)}
        # a leaf finds its input by name: two inputs of one name would read the wrong table's rows out of bounds
        names = collections.Counter(plan.name for plan in plans)
        clash = sorted({name for name, n in names.items() if n > 1} | (names.keys() & self.parsed.keys()))
        if clash:
            raise ConfigError(
                f"DSL plan {clash[0]!r}: the name of another plan or of a parsed feature too; "
                f"a feature name may not hold {HIDDEN_MARK!r}"
            )
        self._fused = K.fuse(
            [plan.program for plan in plans], [len(plan.leaves) for plan in plans], [plan.table for plan in plans]
        )
        self._leaves, self._parsed_read, self._dense_read = self._leaf_table()
        self._tables = [self._table_layout(t) for t in range(schema.tables)]
        self._arenas = threading.local()  # each parse worker's arena, kept from block to block

    def _leaf_table(self):
        """The leaf table of the fused plans, and the features the leaves read in a block: ``(table, index
        among the table's sparse features)`` of each parsed sparse one, then ``(table, index among its dense
        ones)`` of each dense one, each once and in the order of ``Inputs.bases``."""
        leaf_rows = [leaf for plan in self.plans for leaf in plan.leaves]
        leaves = np.zeros((len(leaf_rows), K.LEAF_COLUMNS), np.int64)
        sparse, dense = {}, {}
        for i, (name, table, width) in enumerate(leaf_rows):
            leaves[i, K.L_TABLE] = table
            leaves[i, K.L_WIDTH] = width
            if name not in self.parsed:
                leaves[i, K.L_POOL] = 1
                leaves[i, K.L_AT] = self._plan_of[name]
            else:
                read = dense if width else sparse
                leaves[i, K.L_AT] = read.setdefault((table, self.parsed[name][1]), len(read))
        leaves[leaves[:, K.L_WIDTH] > 0, K.L_AT] += len(sparse)
        return leaves, list(sparse), list(dense)

    def __call__(self, blk):
        tables = blk.tables
        refer = [tab.refer for tab in tables[:-1]]
        refer_base = np.cumsum([0] + [len(r) for r in refer])
        refers = K.Refers(np.concatenate(refer) if refer else _NONE_I, refer_base, len(tables)).checked_when_debugging()
        nrows = [tab.nrows for tab in tables]
        bases, offs, dense = [], [], []
        n = 0
        for table, at in self._parsed_read:
            bases.append(n)
            offs.append(tables[table].sp_offsets[at])
            n += nrows[table] + 1
        n = 0
        for table, at in self._dense_read:
            col = tables[table].dense[at]
            bases.append(n)
            dense.append(col.ravel())
            n += col.size
        table_rows = np.array(nrows, np.int64)
        inputs = K.Inputs(
            self._leaves,
            np.concatenate(offs) if offs else _NONE_I,
            np.array(bases, np.int64),
            blk.sp_keys,
            _NONE_I if blk.sp_hkeys is None else blk.sp_hkeys,
            blk.sp_values,
            np.concatenate(dense).astype(np.float64) if dense else _NONE_F,
            table_rows,
        ).checked_when_debugging()
        size = 64 + 2 * sum(nrows[plan.table] for plan in self.plans)  # two pairs a row before it grows
        output = K.Output(
            np.empty((len(self.plans), max(nrows) + 1), np.int64),
            np.empty(size, np.int64),
            np.empty(size, np.float64),
        ).checked_when_debugging()
        arena = getattr(self._arenas, "arena", None)
        if arena is None:
            arena = self._arenas.arena = K.Arena(
                np.empty(1024, np.int64), np.empty(1024, np.float64)
            ).checked_when_debugging()
        at = np.zeros(3, np.int64)  # plan, row, pairs written: where run_plans resumes
        while True:
            status, need = K.run_plans(
                self._fused.plain(), inputs.plain(), refers.plain(), at, arena.plain(), output.plain(), self.limit
            )
            if status == K.DONE:
                break
            if status == K.TOO_MANY:
                raise self._too_many(self.plans[at[0]], blk, int(at[1]), need)
            if status == K.GROW_ARENA:
                size = max(2 * len(arena.akeys), need)
                arena = self._arenas.arena = K.Arena(
                    np.empty(size, np.int64), np.empty(size, np.float64)
                ).checked_when_debugging()
            else:
                size, out_n = max(2 * len(output.out_keys), need), int(at[2])
                output = output._replace(
                    out_keys=np.concatenate([output.out_keys[:out_n], np.empty(size - out_n, np.int64)]),
                    out_vals=np.concatenate([output.out_vals[:out_n], np.empty(size - out_n, np.float64)]),
                )
        return self._block(blk, output, int(at[2]))

    def _too_many(self, plan, blk, row, need):
        if plan.table == 0:
            sid = blk.sid_bytes[blk.sid_offsets[row] : blk.sid_offsets[row + 1]].tobytes().decode("utf-8", "replace")
            where = f"sample {row} of the chunk (sample id {sid!r})"
        else:
            where = f"aux line {row} of table {plan.table} of the chunk"
        name = plan.name.split(HIDDEN_MARK)[0]  # a hidden plan's feature
        return DslLimitError(
            f"feature {name!r}: one row's result would hold {need:,} pairs, at {where}; the value is",
            source=blk.source,
            offset=blk.start,
            text=str(need),
            feature=name,
            expected=f"at most {self.limit:,} pairs per row (a cartesian of big inputs?)",
        )

    def _block(self, blk, output, out_n):
        """The block with every feature of the schema: parsed columns in place, DSL ones in the pool of results
        (``output``, its first ``out_n`` pairs)."""
        out_off = output.out_off
        values = output.out_vals[:out_n].astype(np.float32)
        tables = []
        for tab, (sparse, dense, from_dsl) in zip(blk.tables, self._tables):
            if sparse is None and dense is None:
                tables.append(tab)
                continue
            offsets = tab.sp_offsets
            if sparse is not None:  # joined flat and reshaped: np.stack takes twice the time
                rows = [
                    tab.sp_offsets[at] if isinstance(at, int) else out_off[self._plan_of[at], : tab.nrows + 1]
                    for at in sparse
                ]
                offsets = np.concatenate(rows).reshape(len(rows), tab.nrows + 1)
            if dense is not None:  # a dense DSL feature has one value a row
                dense = tuple(
                    tab.dense[at]
                    if isinstance(at, int)
                    else values[out_off[self._plan_of[at], 0] :][: tab.nrows].reshape(tab.nrows, 1)
                    for at in dense
                )
            tables.append(Table(tab.nrows, offsets, tab.dense if dense is None else dense, tab.refer, from_dsl))
        return dataclasses.replace(blk, tables=tuple(tables), dsl_keys=output.out_keys[:out_n], dsl_values=values)

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
