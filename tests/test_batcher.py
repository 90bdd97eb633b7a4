"""The batch kernels (measure_piece, batch_layout, copy_pieces and the batch's unique ids) against a
pure-Python twin, on generated blocks."""

import numpy as np
from hypothesis import given, settings, strategies as st

from ingest._native.batch import merge_adjacent, row_lengths
from ingest.features import Schema, make_feature
from ingest.pipeline.batcher import BatchBuilder, cut_batches
from ingest.blocks import Block, Table


@st.composite
def _layouts(draw):
    """Per table: ``(sparse features as "pair" flags, dense widths)``; the label count.  The last table has a
    sparse feature: the schema's tables are the declared ones."""
    tables = draw(st.integers(1, 3))
    return [
        (
            draw(st.lists(st.booleans(), min_size=int(t == tables - 1), max_size=2)),
            draw(st.lists(st.integers(1, 3), max_size=1)),
        )
        for t in range(tables)
    ], draw(st.integers(0, 2))


def _schema(layout, label_count):
    specs = []
    for t, (pairs, widths) in enumerate(layout):
        specs += [make_feature(f"s{t}{f}", "sparse", table=t, serialized=not pair) for f, pair in enumerate(pairs)]
        specs += [make_feature(f"d{t}{d}", "dense", table=t, nvec=w) for d, w in enumerate(widths)]
    return Schema(specs, label_count)


@st.composite
def _blocks(draw, layout, label_count, first_sample):
    """One block: groups of samples, each group with its own rows of every aux table, every row of table k
    referring to a row of its group in table k + 1; sparse features laid out feature by feature, some of
    them (``from_dsl``) in the block's DSL arrays."""
    ntables = len(layout)
    groups = draw(st.integers(1, 4))
    sizes = [[draw(st.integers(1, 3)) for _ in range(groups)] for _ in range(ntables)]  # rows per table, group
    starts = [np.concatenate([[0], np.cumsum(s)]).astype(np.int64) for s in sizes]
    keys, hkeys, values, dsl_keys, dsl_values = [], [], [], [], []
    tables = []
    for t, (pairs, widths) in enumerate(layout):
        nrows = int(starts[t][-1])
        from_dsl = np.array([draw(st.booleans()) for _ in pairs], np.bool_)
        offsets = np.empty((len(pairs), nrows + 1), np.int64)
        for f in range(len(pairs)):
            pool = (dsl_keys, dsl_values) if from_dsl[f] else (keys, values)
            offsets[f, 0] = len(pool[0])
            for r in range(nrows):
                for _ in range(draw(st.integers(0, 3))):
                    pool[0].append(draw(st.integers(-(2**63), 2**63 - 1)))
                    pool[1].append(float(draw(st.integers(-8, 8))) / 4)
                    if not from_dsl[f]:
                        hkeys.append(draw(st.integers(0, 3)))
                offsets[f, r + 1] = len(pool[0])
        dense = tuple(
            np.array([[draw(st.integers(-8, 8)) for _ in range(w)] for _ in range(nrows)], np.float32).reshape(nrows, w)
            for w in widths
        )
        refer = None
        if t < ntables - 1:  # a row of group g refers to one of group g's rows in the next table
            refer = np.array(
                [
                    draw(st.integers(int(starts[t + 1][g]), int(starts[t + 1][g + 1]) - 1))
                    for g in range(groups)
                    for _ in range(sizes[t][g])
                ],
                np.int64,
            )
        tables.append(Table(nrows, offsets, dense, refer, from_dsl if from_dsl.any() else None))
    n = int(starts[0][-1])
    sids = [f"s{first_sample + i}".encode() * draw(st.integers(0, 2)) for i in range(n)]
    sid_bytes = np.frombuffer(b"".join(sids), np.uint8)
    if draw(st.booleans()):  # writable or not: two blocks of a batch whose arrays differ in type (copy_pieces)
        sid_bytes = sid_bytes.copy()
    return Block(
        tables=tuple(tables),
        group_offsets=starts[0],
        sp_keys=np.array(keys, np.int64),
        sp_hkeys=np.array(hkeys, np.int64) if any(hkeys) else None,
        sp_values=np.array(values, np.float32),
        labels=np.arange(n * label_count, dtype=np.float32).reshape(n, label_count) + first_sample,
        timestamps=np.arange(n, dtype=np.int64) + first_sample,
        sid_bytes=sid_bytes,
        sid_offsets=np.concatenate([[0], np.cumsum([len(s) for s in sids])]).astype(np.int64),
        dsl_keys=np.array(dsl_keys, np.int64),
        dsl_values=np.array(dsl_values, np.float32),
    )


def _twin(pieces, layout, label_count, batch_size, pad):
    """The batch of ``pieces``, row by row in Python: per table the rows taken (a group's rows of table k + 1
    are the span its rows of table k refer to), then padding; features as lists of rows."""
    ntables = len(layout)
    rows = [[] for _ in range(ntables)]  # (block, row) per batch row
    indicators = [[] for _ in range(ntables - 1)]
    for blk, r0, r1 in pieces:
        g_starts = [int(x) for x in blk.group_offsets]
        spans = [(max(a, r0), min(b, r1)) for a, b in zip(g_starts, g_starts[1:]) if max(a, r0) < min(b, r1)]
        for lo, hi in spans:
            for t in range(ntables):
                rows[t] += [(blk, r) for r in range(lo, hi)]
                if t < ntables - 1:
                    refer = blk.tables[t].refer
                    nxt = (int(refer[lo:hi].min()), int(refer[lo:hi].max()) + 1)
                    packed = sum(1 for _ in rows[t + 1])
                    indicators[t] += [packed + int(refer[r]) - nxt[0] for r in range(lo, hi)]
                    lo, hi = nxt
    n = len(rows[0])
    padded = pad and n < batch_size
    out = {"n": n, "labels": [], "timestamps": [], "sids": []}
    for blk, r in rows[0]:
        out["labels"].append(blk.labels[r].tolist())
        out["timestamps"].append(int(blk.timestamps[r]))
        out["sids"].append(blk.sid_bytes[blk.sid_offsets[r] : blk.sid_offsets[r + 1]].tobytes())
    extra = [batch_size - n if padded else 0] + [int(padded)] * (ntables - 1)
    for t, (pairs, widths) in enumerate(layout):
        for f, pair in enumerate(pairs):
            feature = []
            for blk, r in rows[t]:
                tab = blk.tables[t]
                dsl = tab.from_dsl is not None and tab.from_dsl[f]
                keys, values = (blk.dsl_keys, blk.dsl_values) if dsl else (blk.sp_keys, blk.sp_values)
                span = range(tab.sp_offsets[f, r], tab.sp_offsets[f, r + 1])
                high = [0 if dsl or blk.sp_hkeys is None else int(blk.sp_hkeys[i]) for i in span]
                ids = [[h, int(keys[i])] for h, i in zip(high, span)] if pair else [int(keys[i]) for i in span]
                feature.append((ids, [float(values[i]) for i in span]))
            out[f"s{t}{f}"] = feature + [([], [])] * extra[t]
        for d, w in enumerate(widths):
            out[f"d{t}{d}"] = [blk.tables[t].dense[d][r].tolist() for blk, r in rows[t]] + [[0.0] * w] * extra[t]
    out["labels"] += [[0.0] * label_count] * extra[0]
    out["timestamps"] += [0] * extra[0]
    out["indicators"] = [ind + [len(rows[k + 1]) + extra[k + 1] - 1] * extra[k] for k, ind in enumerate(indicators)]
    return out


def _plain(batch, layout):
    out = {
        "n": len(batch),
        "labels": batch.labels.tolist(),
        "timestamps": batch.timestamps.tolist(),
        "sids": [batch.sample_id(r) for r in range(len(batch))],
        "indicators": [ind.tolist() for ind in batch.indicators],
    }
    for t, (pairs, widths) in enumerate(layout):
        for f in range(len(pairs)):
            feat = batch[f"s{t}{f}"]
            o = feat.offsets
            out[f"s{t}{f}"] = [
                (feat.ids[o[r] : o[r + 1]].tolist(), feat.values[o[r] : o[r + 1]].tolist()) for r in range(len(o) - 1)
            ]
        for d in range(len(widths)):
            out[f"d{t}{d}"] = batch[f"d{t}{d}"].tolist()
    return out


def _unique_twin(ids):
    """Distinct ids in the order they first come, and each id's place among them."""
    order = {}
    inverse = [order.setdefault(tuple(k) if isinstance(k, list) else k, len(order)) for k in ids]
    return list(order), inverse


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    shape=_layouts(),
    batch_size=st.integers(1, 7),
    pad=st.booleans(),
    split_group=st.booleans(),
    unique=st.booleans(),
)
def test_batches_match_the_twin(data, shape, batch_size, pad, split_group, unique):
    """Batches cut from 1-4 blocks (so some take pieces of two blocks, built in one kernel call, whose arrays may
    differ in type, and some of three or more, two pieces a call), 1-3 tables, pairs, DSL features, dense features,
    padding, unique ids: every array the kernels fill is what the row-by-row twin gives."""
    layout, label_count = shape
    blocks = []
    for b in range(data.draw(st.integers(1, 4))):
        blocks.append(data.draw(_blocks(layout, label_count, 100 * b)))
    if not split_group:
        batch_size = max(batch_size, 3)  # a group has at most 3 samples
    builder = BatchBuilder(_schema(layout, label_count), batch_size, pad, unique=unique, keep_pieces=True)
    batches = list(cut_batches(blocks, builder, split_group=split_group))
    assert sum(len(b) for b in batches) == sum(blk.nrows for blk in blocks)
    for batch in batches:
        batch.validate()
        plain = _plain(batch, layout)
        assert plain == _twin(batch.pieces, layout, label_count, batch_size, pad)
        for t, (pairs, _) in enumerate(layout):
            for f in range(len(pairs) if unique else 0):
                feat = batch[f"s{t}{f}"]
                order, inverse = _unique_twin([i for ids, _ in plain[f"s{t}{f}"] for i in ids])
                got = feat.unique_ids.tolist()
                assert [tuple(u) if isinstance(u, list) else u for u in got] == order
                assert feat.inverse.tolist() == inverse


@given(data=st.data(), tables=st.integers(2, 3), m=st.integers(1, 8))
def test_merge_adjacent_matches_twin(data, tables, m):
    """Runs of groups whose ranges follow each other in every aux table become one range (table 0's ranges,
    consecutive groups, always follow each other); the rows they cover, in order, are unchanged."""
    ends = [np.cumsum(data.draw(st.lists(st.integers(1, 3), min_size=m, max_size=m))) for _ in range(tables)]
    ranges = np.zeros((tables, 2, m + 2), np.int64)
    for t in range(tables):  # each group's rows, and now and then a gap or a row shared with the group before
        shift = np.cumsum(data.draw(st.lists(st.integers(-1, 1), min_size=m, max_size=m))) if t else np.zeros(m)
        ranges[t, 1, :m] = ends[t] + 5 + shift
        ranges[t, 0, :m] = ranges[t, 1, :m] - np.diff(np.concatenate([[0], ends[t]]))
    want = []  # the twin: (first group, last group) of each run
    for g in range(m):
        if want and all(ranges[t, 0, g] == ranges[t, 1, g - 1] for t in range(1, tables)):
            want[-1] = (want[-1][0], g)
        else:
            want.append((g, g))
    before = ranges.copy()
    k = merge_adjacent(ranges, m)
    assert k == len(want)
    for j, (a, b) in enumerate(want):
        assert ranges[:, 0, j].tolist() == before[:, 0, a].tolist()
        assert ranges[:, 1, j].tolist() == before[:, 1, b].tolist()


@given(
    lengths=st.lists(st.lists(st.integers(0, 50), min_size=0, max_size=9), min_size=1, max_size=5).filter(
        lambda rows: len({len(r) for r in rows}) == 1
    )
)
def test_row_lengths_match_twin(lengths):
    """A KeyedJaggedTensor's lengths from an [F, R + 1] offsets matrix: every feature's rows, one after the other."""
    offsets = np.array([np.concatenate([[0], np.cumsum(r, dtype=np.int64)]) for r in lengths], np.int64)
    out = np.full(offsets.shape[0] * (offsets.shape[1] - 1), -1, np.int64)
    row_lengths(offsets, out)
    assert out.tolist() == [n for r in lengths for n in r]
