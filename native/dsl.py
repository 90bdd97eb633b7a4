"""The feature-DSL interpreter (docs/formats.md, the DSL): the plans of opcodes a reader's DSL features compile to,
run per row of a table.

``ingest.dsl`` compiles an expression into ``ops`` (one row per operation: opcode,
destination register, operands) over numbered registers.  ``run_plans`` evaluates every plan of a reader for
every row of its table in a block, in one call: a register holds a list of (key, value) pairs in a
per-row arena (int64 keys, float64 values), and the output register of each row is
appended to one pool that holds every plan's result, CSR per plan.  Inputs (leaves) are declared features read
through the ``refer`` chain when they live in a deeper (aux) table, or the results of earlier plans.
"""

import numpy as np

from .bundles import bundle
from .index import _u
from .jit import helper, inline, kernel

from .mix import mix64

# opcodes: (op, dst, a, b, c)
LEAF_SPARSE = 1  # a: leaf
LEAF_DENSE = 2  # a: leaf
CARTESIAN = 3  # a, b: registers
MATCH = 4  # a, b: registers
HASH = 5  # a: register, b: buckets
BUCKETIZE = 6  # a: register, b: first constant, c: number of boundaries
LOG = 7  # a: register
SUM = 8
COUNT = 9
AVG = 10
MAX = 11
MIN = 12
COSINE = 13  # a, b: registers
DOT = 14
OP_COLUMNS = 5
# what operands a and b of each opcode number: a register (R), a leaf (L), a constant (C), or nothing (-)
OPERANDS = {LEAF_SPARSE: "L-", LEAF_DENSE: "L-", CARTESIAN: "RR", MATCH: "RR", HASH: "R-", BUCKETIZE: "RC"}
OPERANDS.update({op: "R-" for op in (LOG, SUM, COUNT, AVG, MAX, MIN)})
OPERANDS.update({op: "RR" for op in (COSINE, DOT)})

# columns of the leaf table: table, where it is read (see run_plans), dense width (0: sparse),
# and for a sparse leaf its pool (0: the block's parsed columns, 1: results of earlier plans)
L_TABLE = 0
L_AT = 1
L_WIDTH = 2
L_POOL = 3
LEAF_COLUMNS = 4

# A compiled expression: its ops (rows of OP_COLUMNS), the constants they read, the register holding the
# result and how many registers there are.
Program = bundle("Program", ops="i8[:, :]", consts="f8[:]", out_reg="int", nregs="int")
# Every plan of a reader, one after the other (``fuse``): plan p's ops are ``ops[op_start[p]:op_start[p + 1]]``,
# over registers, leaves and constants numbered across all the plans; it runs over the rows of ``table[p]``, its
# result is register ``out_reg[p]``, and ``shape[p]`` says whether it is one of the plans run without registers.
Plans = bundle(
    "Plans",
    ops="i8[:, :]",
    consts="f8[:]",
    op_start="i8[:]",
    out_reg="i8[:]",
    table="i8[:]",
    shape="i8[:]",
    nregs="int",
)

# shapes of plan (``plan_shape``): the commonest features of a CTR schema, a declared feature crossed with or
# matched against another (or crossed with two others), or a feature read as it is (an aggregate computed per aux
# line, read by its samples), are written straight from their inputs to the output, with no copy through the
# registers
SHAPE_ANY = 0
SHAPE_CROSS = 1  # leaf a, leaf b, cartesian(a, b)
SHAPE_MATCH = 2  # leaf a, leaf b, match(a, b)
SHAPE_LEAF = 3  # one sparse leaf
SHAPE_CROSS3 = 4  # leaf a, leaf b, cartesian(a, b), leaf c, cartesian(ab, c): cartesian(a, b, c)
# What the plans read in one block: the leaf table, the row offsets of the parsed features they read end to end
# and where each starts there (see run_plans), the parsed columns, the dense leaves end to end (float64), and the
# rows of each table.
Inputs = bundle(
    "Inputs",
    leaves="i8[:, :]",
    leaf_off="i8[:]",
    bases="i8[:]",
    raw_keys="i8[:]",
    raw_hkeys="i8[:]",
    raw_vals="f4[:]",
    dense_flat="f8[:]",
    table_rows="i8[:]",
)
# The refer chain of a block of ``ntables`` tables, the same for every plan run on it (see run_plans).
Refers = bundle("Refers", refer_flat="i8[:]", refer_base="i8[:]", ntables="int")
# Pairs of the registers of one row, reused from row to row; replaced by a bigger one on GROW_ARENA.
Arena = bundle("Arena", akeys="i8[:]", avals="f8[:]")
# Every plan's result in one pool, CSR per plan: row r of plan p is ``out_keys/out_vals[out_off[p, r]:
# out_off[p, r + 1]]``; replaced by a bigger pool (the same ``out_off``) on GROW_OUT.
Output = bundle("Output", out_off="i8[:, :]", out_keys="i8[:]", out_vals="f8[:]")


def fuse(programs, leaf_counts, tables):
    """The ``Plans`` of ``programs`` (each a ``Program``, with ``leaf_counts`` leaves, run on ``tables``): their ops
    renumbered so that plan p's registers, leaves and constants follow those of the plans before it."""
    ops, consts, op_start, out_reg = [], [], [0], []
    regs = leaves = 0
    shapes = [plan_shape(program) for program in programs]
    for program, nleaves in zip(programs, leaf_counts):
        base = {"R": regs, "L": leaves, "C": len(consts), "-": 0}
        for op, dst, a, b, c in program.ops.tolist():
            kind_a, kind_b = OPERANDS[op]
            ops.append((op, dst + regs, a + base[kind_a], b + base[kind_b], c))
        consts += program.consts.tolist()
        op_start.append(len(ops))
        out_reg.append(program.out_reg + regs)
        regs += program.nregs
        leaves += nleaves
    return Plans(
        np.array(ops, np.int64).reshape(len(ops), OP_COLUMNS),
        np.array(consts, np.float64),
        np.array(op_start, np.int64),
        np.array(out_reg, np.int64),
        np.array(tables, np.int64),
        np.array(shapes, np.int64),
        regs,
    ).checked()


def plan_shape(program):
    """The ``SHAPE_*`` of a ``Program``."""
    ops = program.ops.tolist()
    out = program.out_reg
    if len(ops) == 1 and ops[0][0] == LEAF_SPARSE and ops[0][1] == out:
        return SHAPE_LEAF
    if len(ops) not in (3, 5) or ops[0][0] != LEAF_SPARSE or ops[1][0] != LEAF_SPARSE:
        return SHAPE_ANY
    op, dst, a, b, _ = ops[2]
    if (a, b) != (ops[0][1], ops[1][1]):
        return SHAPE_ANY
    if len(ops) == 3:
        return {CARTESIAN: SHAPE_CROSS, MATCH: SHAPE_MATCH}.get(op, SHAPE_ANY) if dst == out else SHAPE_ANY
    op2, dst2, a2, b2, _ = ops[4]
    if op == op2 == CARTESIAN and ops[3][0] == LEAF_SPARSE and (a2, b2) == (dst, ops[3][1]) and dst2 == out:
        return SHAPE_CROSS3
    return SHAPE_ANY


# status of run_plans
DONE = 0
GROW_ARENA = 1  # a row needs more arena: grow to at least `need`, call again (it resumes at that row)
GROW_OUT = 2  # the output is full: grow it to at least `need`, call again
TOO_MANY = 3  # a row's result would exceed `limit` pairs

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_LOG_EPS = 1e-8


@inline
def _cross(a, b):
    x = mix64(np.uint64(np.int64(a)) + _GOLDEN) ^ np.uint64(np.int64(b))  # wrapping, as Python too
    return np.int64(mix64(x) >> np.uint64(1))


@kernel
def cross64(a, b):
    """The crossed key of int64 keys ``a`` then ``b``: ``mix(mix(a + golden) ^ b) >> 1``, in [0, 2**63)."""
    return _cross(a, b)


@kernel
def run_plans(plans, inputs, refers, at, arena, output, limit):
    """Evaluate the plans from plan ``at[0]``, row ``at[1]``, with ``at[2]`` pairs already in the output; returns
    ``(status, need)`` and leaves in ``at`` where to resume (on ``DONE``: past the last plan, and the pairs of
    every result).

    Row ``r`` of plan ``p``'s result is ``out_keys/out_vals[out_off[p, r]:out_off[p, r + 1]]``.  Sparse leaf
    ``i`` of row ``r`` (of its own table) holds the pairs ``leaf_off[base + r] : leaf_off[base + r + 1]`` of
    the block's parsed columns (``raw_*``; a key with a non-zero high word enters as ``cross64(hkey, key)``),
    ``base`` being ``bases[L_AT]``, or (``L_POOL`` 1) row ``r`` of the result of plan ``L_AT``, an earlier one.
    Dense leaf ``i`` gives ``(j, v_j)`` for its ``width`` elements at ``dense_flat[base + r * width + j]``.
    A table-k row refers to row ``refer_flat[refer_base[k] + r]`` of table k + 1.

    Every index is unsigned (``_u``), which spares each load numba's wraparound branch: the plans ran in two
    thirds of the time.
    """
    ops, consts, op_start, out_regs, plan_tables, shapes, nregs = plans
    leaves, leaf_off, bases, raw_keys, raw_hkeys, raw_vals, dense_flat, table_rows = inputs
    refer_flat, refer_base, ntables = refers
    akeys, avals = arena
    out_off, out_keys, out_vals = output
    start = np.empty(nregs, np.int64)
    size = np.empty(nregs, np.int64)
    rows = np.empty(ntables, np.int64)
    # per leaf op: the row it last read and where it put the pairs in the arena.  When both match, the pairs are
    # still there (in a row the ops before it write below it and those after it above), and are not copied
    # again: an aux line's leaves are read once for the samples of its group.
    leaf_row = np.full(len(ops), -1, np.int64)
    leaf_at = np.empty(len(ops), np.int64)
    has_h = len(raw_hkeys) > 0
    cap = len(akeys)
    plan = at[0]
    row = at[1]
    out_n = at[2]
    while plan < len(out_regs):
        table = plan_tables[_u(plan)]
        out_reg = out_regs[_u(plan)]
        nrows = table_rows[_u(table)]
        if row == 0:
            out_off[_u(plan), 0] = out_n
        shape = shapes[_u(plan)]
        # a direct plan's inputs (``_leaf_place``), the same for every row
        place_a = place_b = place_c = (np.int64(0), np.int64(0), np.int64(0))
        if shape != SHAPE_ANY:
            first = op_start[_u(plan)]
            place_a = _leaf_place(ops[_u(first), 2], leaves, bases)
            if shape != SHAPE_LEAF:
                place_b = _leaf_place(ops[_u(first + 1), 2], leaves, bases)
            if shape == SHAPE_CROSS3:
                place_c = _leaf_place(ops[_u(first + 3), 2], leaves, bases)
        while row < nrows:
            rows[_u(table)] = row
            for k in range(table, ntables - 1):
                rows[_u(k + 1)] = refer_flat[_u(refer_base[_u(k)] + rows[_u(k)])]
            if shape != SHAPE_ANY:
                span_a = span_b = span_c = _leaf_span(place_a, rows, leaf_off, out_off)  # b, c: when the shape has them
                need = span_a[2]
                if shape != SHAPE_LEAF:  # the checks of the ops in turn: a, b, a x b (then c, (a x b) x c)
                    if need > limit:
                        return _paused(at, plan, row, out_n, TOO_MANY, need)
                    span_b = _leaf_span(place_b, rows, leaf_off, out_off)
                    if span_b[2] > limit:
                        return _paused(at, plan, row, out_n, TOO_MANY, span_b[2])
                    if shape != SHAPE_MATCH:
                        need *= span_b[2]
                    if shape == SHAPE_CROSS3:
                        if need > limit:
                            return _paused(at, plan, row, out_n, TOO_MANY, need)
                        span_c = _leaf_span(place_c, rows, leaf_off, out_off)
                        if span_c[2] > limit:
                            return _paused(at, plan, row, out_n, TOO_MANY, span_c[2])
                        need *= span_c[2]
                if need > limit:
                    return _paused(at, plan, row, out_n, TOO_MANY, need)
                if out_n + need > len(out_keys):
                    return _paused(at, plan, row, out_n, GROW_OUT, out_n + need)
                if shape == SHAPE_CROSS3:  # its own loops: the two-input plans' stay as tight
                    out_n = _cross3(
                        span_a, span_b, span_c, raw_keys, raw_hkeys, has_h, raw_vals, out_keys, out_vals, out_n
                    )
                else:
                    pool_a, pa, na = span_a
                    pool_b, pb, nb = span_b
                    for x in range(na):
                        ka, va = _leaf_pair(pool_a, pa + x, raw_keys, raw_hkeys, has_h, raw_vals, out_keys, out_vals)
                        if shape == SHAPE_LEAF:
                            out_keys[_u(out_n)] = ka
                            out_vals[_u(out_n)] = va
                            out_n += 1
                            continue
                        for y in range(nb):
                            kb, vb = _leaf_pair(
                                pool_b, pb + y, raw_keys, raw_hkeys, has_h, raw_vals, out_keys, out_vals
                            )
                            if shape == SHAPE_CROSS:
                                out_keys[_u(out_n)] = _cross(ka, kb)
                                out_vals[_u(out_n)] = va * vb
                                out_n += 1
                            elif kb == ka:  # match: the first occurrence in b
                                out_keys[_u(out_n)] = ka
                                out_vals[_u(out_n)] = va * vb
                                out_n += 1
                                break
                out_off[_u(plan), _u(row + 1)] = out_n
                row += 1
                continue
            top = 0
            for i in range(op_start[_u(plan)], op_start[_u(plan + 1)]):
                op = ops[_u(i), 0]
                dst = ops[_u(i), 1]
                a = ops[_u(i), 2]
                b = ops[_u(i), 3]
                # pairs this op writes, checked against the arena before writing
                if op == LEAF_SPARSE:
                    place = _leaf_place(a, leaves, bases)
                    r = rows[_u(place[0])]
                    pool, p0, need = _leaf_span(place, rows, leaf_off, out_off)
                elif op == LEAF_DENSE:
                    need = leaves[_u(a), L_WIDTH]
                elif op == CARTESIAN:
                    need = size[_u(a)] * size[_u(b)]
                elif op == MATCH or op == HASH or op == BUCKETIZE or op == LOG:
                    need = size[_u(a)]
                else:
                    need = 1
                if need > limit:
                    return _paused(at, plan, row, out_n, TOO_MANY, need)
                if top + need > cap:
                    return _paused(at, plan, row, out_n, GROW_ARENA, top + need)
                s = top
                n = 0
                if op == LEAF_SPARSE:
                    if leaf_row[_u(i)] != r or leaf_at[_u(i)] != s:
                        for j in range(need):
                            key, value = _leaf_pair(
                                pool, p0 + j, raw_keys, raw_hkeys, has_h, raw_vals, out_keys, out_vals
                            )
                            akeys[_u(s + j)] = key
                            avals[_u(s + j)] = value
                        leaf_row[_u(i)] = r
                        leaf_at[_u(i)] = s
                    n = need
                elif op == LEAF_DENSE:
                    w = leaves[_u(a), L_WIDTH]
                    r = rows[_u(leaves[_u(a), L_TABLE])]
                    if leaf_row[_u(i)] != r or leaf_at[_u(i)] != s:
                        d0 = bases[_u(leaves[_u(a), L_AT])] + r * w
                        for j in range(w):
                            akeys[_u(s + j)] = j
                            avals[_u(s + j)] = dense_flat[_u(d0 + j)]
                        leaf_row[_u(i)] = r
                        leaf_at[_u(i)] = s
                    n = w
                elif op == CARTESIAN:
                    for x in range(start[_u(a)], start[_u(a)] + size[_u(a)]):
                        for y in range(start[_u(b)], start[_u(b)] + size[_u(b)]):
                            akeys[_u(s + n)] = _cross(akeys[_u(x)], akeys[_u(y)])
                            avals[_u(s + n)] = avals[_u(x)] * avals[_u(y)]
                            n += 1
                elif op == MATCH:
                    for x in range(start[_u(a)], start[_u(a)] + size[_u(a)]):
                        for y in range(start[_u(b)], start[_u(b)] + size[_u(b)]):
                            if akeys[_u(y)] == akeys[_u(x)]:  # the first occurrence in b
                                akeys[_u(s + n)] = akeys[_u(x)]
                                avals[_u(s + n)] = avals[_u(x)] * avals[_u(y)]
                                n += 1
                                break
                elif op == HASH:
                    for x in range(start[_u(a)], start[_u(a)] + size[_u(a)]):
                        akeys[_u(s + n)] = _cross(akeys[_u(x)], 0) % b
                        avals[_u(s + n)] = avals[_u(x)]
                        n += 1
                elif op == BUCKETIZE:
                    c = ops[_u(i), 4]
                    for x in range(start[_u(a)], start[_u(a)] + size[_u(a)]):
                        v = avals[_u(x)]
                        # the boundaries <= v, a prefix of the non-decreasing boundaries (none for a NaN): by bisection
                        k, hi = 0, c
                        while k < hi:
                            mid = (k + hi) >> 1
                            if consts[_u(b + mid)] <= v:
                                k = mid + 1
                            else:
                                hi = mid
                        akeys[_u(s + n)] = k
                        avals[_u(s + n)] = 1.0
                        n += 1
                elif op == LOG:
                    for x in range(start[_u(a)], start[_u(a)] + size[_u(a)]):
                        akeys[_u(s + n)] = akeys[_u(x)]
                        avals[_u(s + n)] = np.log(avals[_u(x)] + _LOG_EPS)
                        n += 1
                elif op == COSINE or op == DOT:
                    m = min(size[_u(a)], size[_u(b)])
                    dot = 0.0
                    na = 0.0
                    nb = 0.0
                    for j in range(m):
                        va = avals[_u(start[_u(a)] + j)]
                        vb = avals[_u(start[_u(b)] + j)]
                        dot += va * vb
                        na += va * va
                        nb += vb * vb
                    akeys[_u(s)] = 0
                    avals[_u(s)] = dot if op == DOT else dot / (np.sqrt(na) * np.sqrt(nb) + _LOG_EPS)
                    n = 1
                else:  # aggregates: one pair
                    key = np.int64(0)
                    acc = 0.0
                    for j in range(size[_u(a)]):
                        v = avals[_u(start[_u(a)] + j)]
                        if op == SUM or op == AVG:
                            acc += v
                        elif op == MAX or op == MIN:
                            if j == 0 or (v > acc if op == MAX else v < acc):
                                acc = v
                                key = akeys[_u(start[_u(a)] + j)]
                    if op == COUNT:
                        acc = float(size[_u(a)])
                    elif op == AVG and size[_u(a)] > 0:
                        acc /= size[_u(a)]
                    akeys[_u(s)] = key
                    avals[_u(s)] = acc
                    n = 1
                start[_u(dst)] = s
                size[_u(dst)] = n
                top = s + n
            n = size[_u(out_reg)]
            if out_n + n > len(out_keys):
                return _paused(at, plan, row, out_n, GROW_OUT, out_n + n)
            s = start[_u(out_reg)]
            for j in range(n):
                out_keys[_u(out_n + j)] = akeys[_u(s + j)]
                out_vals[_u(out_n + j)] = avals[_u(s + j)]
            out_n += n
            out_off[_u(plan), _u(row + 1)] = out_n
            row += 1
        plan += 1
        row = 0
    return _paused(at, plan, 0, out_n, DONE, 0)


@inline
def _leaf_place(a, leaves, bases):
    """``(table, pool, at)`` of sparse leaf ``a``: in pool 0 (the parsed columns) its offsets start at
    ``leaf_off[at]``, in pool 1 it is the result of plan ``at``."""
    where = leaves[_u(a), L_AT]
    pool = leaves[_u(a), L_POOL]
    return leaves[_u(a), L_TABLE], pool, bases[_u(where)] if pool == 0 else where


@inline
def _leaf_span(place, rows, leaf_off, out_off):
    """``(pool, first, count)`` of the pairs the sparse leaf at ``place`` (``_leaf_place``) holds in the current
    ``rows``."""
    table, pool, at = place
    r = rows[_u(table)]
    if pool == 0:
        p0 = leaf_off[_u(at + r)]
        return pool, p0, leaf_off[_u(at + r + 1)] - p0
    p0 = out_off[_u(at), _u(r)]
    return pool, p0, out_off[_u(at), _u(r + 1)] - p0


@helper
def _cross3(span_a, span_b, span_c, raw_keys, raw_hkeys, has_h, raw_vals, out_keys, out_vals, out_n):
    """Write ``cartesian(a, b, c)`` of one row's inputs (``_leaf_span`` each) from ``out_n`` on; returns where it
    ended."""
    pool_a, pa, na = span_a
    pool_b, pb, nb = span_b
    pool_c, pc, nc = span_c
    for x in range(na):
        ka, va = _leaf_pair(pool_a, pa + x, raw_keys, raw_hkeys, has_h, raw_vals, out_keys, out_vals)
        for y in range(nb):
            kb, vb = _leaf_pair(pool_b, pb + y, raw_keys, raw_hkeys, has_h, raw_vals, out_keys, out_vals)
            kab = _cross(ka, kb)
            vab = va * vb
            for z in range(nc):
                kc, vc = _leaf_pair(pool_c, pc + z, raw_keys, raw_hkeys, has_h, raw_vals, out_keys, out_vals)
                out_keys[_u(out_n)] = _cross(kab, kc)
                out_vals[_u(out_n)] = vab * vc
                out_n += 1
    return out_n


@inline
def _leaf_pair(pool, p, raw_keys, raw_hkeys, has_h, raw_vals, out_keys, out_vals):
    """The (key, value) at ``p`` of a leaf's pool, as the registers hold it (a high word crossed into the key)."""
    if pool != 0:
        return out_keys[_u(p)], out_vals[_u(p)]
    key = raw_keys[_u(p)]
    if has_h and raw_hkeys[_u(p)] != 0:
        key = _cross(raw_hkeys[_u(p)], key)
    return key, np.float64(raw_vals[_u(p)])


@inline
def _paused(at, plan, row, out_n, status, need):
    """``(status, need)``, with where ``run_plans`` resumes in ``at``."""
    at[0] = plan
    at[1] = row
    at[2] = out_n
    return status, need
