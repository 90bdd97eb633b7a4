"""Per-batch unique ids: the hash-table kernel against a dict, and through the reader."""

import pickle

import numpy as np
from hypothesis import given, strategies as st

import ingest
from ingest import synthetic
from ingest import SparseFeature
from ingest._native.unique import BatchIds, unique_ids_of_batch, unique_layout, unique_sizes
from ingest.pipeline.batcher import Scratch, unique_rows_into, unique_views

from conftest import make_reader


def naive_unique(ids, offsets):
    """The twin: distinct ids in first-occurrence order, inverse, rows of each distinct id."""
    keys = [tuple(i) if isinstance(i, list) else i for i in ids.tolist()]
    order, inverse = {}, []
    for k in keys:
        inverse.append(order.setdefault(k, len(order)))
    rows_of = [[] for _ in order]
    for r in range(len(offsets) - 1):
        for i in range(offsets[r], offsets[r + 1]):
            rows_of[inverse[i]].append(r)
    return list(order), inverse, rows_of


def _packed(arrays):
    """``(buf, meta, views)``: ``arrays`` copied one after the other into one buffer, described as ``batch_layout``
    describes a batch's parts (parts.py), and the copies."""
    starts = np.cumsum([0] + [(a.nbytes + 63) & -64 for a in arrays]).tolist()  # each on a 64-byte boundary
    buf = np.zeros(starts[-1], np.uint8)
    meta = np.array([[at, len(a), a.shape[1] if a.ndim == 2 else 1] for at, a in zip(starts, arrays)], np.int64)
    views = [np.ndarray(a.shape, a.dtype, buf, at) for at, a in zip(starts, arrays)]
    for view, a in zip(views, arrays):
        view[...] = a
    return buf, meta.reshape(-1), views


_key = st.integers(-3, 3) | st.integers(-(2**63), 2**63 - 1)
_row = st.lists(st.tuples(st.integers(-1, 1) | st.integers(-(2**63), 2**63 - 1), _key), max_size=6)


@given(
    data=st.data(),
    tables=st.lists(st.integers(0, 12), min_size=1, max_size=3),
    pair=st.lists(st.booleans(), min_size=1, max_size=5),
)
def test_kernel_matches_twin(data, tables, pair):
    """The sparse features of a batch over its tables (``tables`` gives each table's rows), laid out as
    the batch builder lays them (the ids of every serialized feature in one array, of every pair feature
    in another), in one call for the unique ids and one for their rows, on a scratch of its own (a consumer's
    thread computes the rows)."""
    pair = np.array(pair, np.bool_)
    table_of = np.array(
        sorted(data.draw(st.lists(st.integers(0, len(tables) - 1), min_size=len(pair), max_size=len(pair)))), np.int64
    )
    row_of = np.array([f - int(np.searchsorted(table_of, t)) for f, t in enumerate(table_of)], np.int64)
    offsets = tuple(np.zeros((int((table_of == t).sum()), rows + 1), np.int64) for t, rows in enumerate(tables))
    flat = []
    for f in range(len(pair)):
        rows = data.draw(st.lists(_row, min_size=tables[table_of[f]], max_size=tables[table_of[f]]))
        offsets[table_of[f]][row_of[f], 1:] = np.cumsum([len(r) for r in rows])
        flat.append([p for r in rows for p in r])
    counts = np.array([len(ids) for ids in flat], np.int64)
    as_pairs = [np.array(ids, np.int64).reshape(len(ids), 2) for ids in flat]
    ids = [a if p else a[:, 1] for a, p in zip(as_pairs, pair)]
    keys = np.concatenate([np.empty(0, np.int64)] + [a for a, p in zip(ids, pair) if not p])
    pairs = np.concatenate([np.empty((0, 2), np.int64)] + [a for a, p in zip(ids, pair) if p])
    key_base = np.zeros(len(pair), np.int64)
    for f in range(len(pair)):
        key_base[f] = sum(counts[g] for g in range(f) if pair[g] == pair[f])
    row_offsets = [offsets[t][r] for t, r in zip(table_of, row_of)]
    feats = [
        SparseFeature(f"f{f}", a, np.ones(len(a), np.float32), o) for f, (a, o) in enumerate(zip(ids, row_offsets))
    ]
    sizes = unique_sizes(len(keys), len(pairs), len(pair))
    outputs = [np.zeros(sizes[0], np.int64), np.zeros(sizes[1], np.int32), np.zeros(sizes[2], np.int64)]
    buf, meta, parts = _packed([keys, pairs, np.empty(0, np.float32), *offsets, *outputs])
    ids = BatchIds.args(buf, meta, pair, key_base, counts, table_of, row_of)
    unique_ids_of_batch(ids, Scratch().table_room(len(keys) + len(pairs)))
    unique_rows_into(ids, len(keys) + len(pairs), Scratch())
    unique_views(feats, pair, parts[-3:])
    for f, feat in enumerate(feats):
        order, inverse, rows_of = naive_unique(feat.ids, row_offsets[f])
        got_u = [tuple(u) for u in feat.unique_ids.tolist()] if pair[f] else feat.unique_ids.tolist()
        assert got_u == order
        assert feat.inverse.tolist() == inverse
        uo = feat.unique_row_offsets
        assert uo[0] == 0 and len(uo) == len(order) + 1
        assert [feat.unique_rows[uo[u] : uo[u + 1]].tolist() for u in range(len(order))] == rows_of


@given(counts=st.lists(st.integers(0, 1000), max_size=6), data=st.data())
def test_unique_layout_matches_twin(counts, data):
    """Where each feature's outputs go: running totals of its ids and of its id words (2 for a pair)."""
    pair = data.draw(st.lists(st.booleans(), min_size=len(counts), max_size=len(counts)))
    at = np.empty(len(counts) + 1, np.int64)
    words = np.empty(len(counts) + 1, np.int64)
    unique_layout(np.array(counts, np.int64), np.array(pair, np.bool_), at, words)
    want_at = [sum(counts[:f]) for f in range(len(counts) + 1)]
    want_words = [sum(c * (2 if p else 1) for c, p in zip(counts[:f], pair)) for f in range(len(counts) + 1)]
    assert at.tolist() == want_at and words.tolist() == want_words


def test_reader_fills_unique_ids_for_every_sparse_feature(tmp_path):
    path = tmp_path / "u.txt"
    path.write_text("a|g|x@5,7,5;y@1:0.5||1\nb|g|x@7,9;y@1:2.0||0\nc|h|x@9||1\n")
    reader = make_reader([path], sparse=["x"], batch_size=(2,), unique_ids=True)
    reader.feature("y", "sparse")  # ids as (hkey, key) pairs
    batches = reader.startup().read_all()
    first = batches[0]
    first.validate()
    x = first["x"]
    assert x.unique_ids.tolist() == [5, 7, 9]
    assert x.inverse.tolist() == [0, 1, 0, 1, 2]
    assert x.unique_row_offsets.tolist() == [0, 2, 4, 5]
    assert x.unique_rows.tolist() == [0, 0, 0, 1, 1]
    assert first["y"].unique_ids.tolist() == [[0, 1]]
    assert batches[1]["x"].unique_ids.tolist() == [9]  # per batch
    seconds = reader.stats()["seconds"]
    assert "batch" in seconds and "unique" not in seconds  # a parse worker's batches: with their copies, one call
    again = make_reader([path], sparse=["x"], batch_size=(2,), unique_ids=True).deterministic(True)
    again.feature("y", "sparse")
    assert [b["x"].unique_ids.tolist() for b in again.startup().read_all()] == [[5, 7, 9], [9]]
    assert "unique" in again.stats()["seconds"]  # on the unique-id thread, behind the batcher thread


def test_unique_rows_are_computed_when_first_asked_for(synthetic_file):
    """A batch's unique rows wait for the consumer: reading one feature's fills every feature's, batches kept
    while later ones are built keep theirs, and a pickled batch carries them."""
    reader = make_reader([synthetic_file], batch_size=(256,), unique_ids=True)
    synthetic.declare(reader, serialized=True)
    batches = reader.startup().read_all()
    first, last = batches[0], batches[-1]
    sparse = [first[name] for name in first.sparse_names]
    assert first._laid.rows_from is not None and all(feat.rows_filler is first._laid for feat in sparse)
    sparse[-1].unique_rows
    assert first._laid.rows_from is None
    copy = pickle.loads(pickle.dumps(last))
    for batch in (first, copy):
        for name in batch.sparse_names:
            feat = batch[name]
            order, _, rows_of = naive_unique(feat.ids, feat.offsets)
            uo = feat.unique_row_offsets
            assert [feat.unique_rows[uo[u] : uo[u + 1]].tolist() for u in range(len(order))] == rows_of


def test_unique_ids_off_by_default(tmp_path):
    path = tmp_path / "u.txt"
    path.write_text("a|g|x@5||1\n")
    [batch] = make_reader([path], sparse=["x"]).startup().read_all()
    assert batch["x"].unique_ids is None
    assert ingest.DataReader("r", [str(path)]).unique_ids(True)._options.unique


def test_parallel_workers_fill_unique_ids_as_the_twin(synthetic_file):
    """Two parse workers compute unique ids of their own batches, each with its own hash table."""
    reader = make_reader([synthetic_file], threads=(2,), unit_bytes=(100_000,), batch_size=(128,), unique_ids=True)
    synthetic.declare(reader, serialized=True)
    checked = 0
    for batch in reader.startup():
        for name in batch:
            feat = batch[name]
            if not isinstance(feat, SparseFeature):
                continue
            order, inverse, rows_of = naive_unique(feat.ids, feat.offsets)
            got = [tuple(u) for u in feat.unique_ids.tolist()] if feat.ids.ndim == 2 else feat.unique_ids.tolist()
            assert got == order and feat.inverse.tolist() == inverse
            uo = feat.unique_row_offsets
            assert [feat.unique_rows[uo[u] : uo[u + 1]].tolist() for u in range(len(order))] == rows_of
            checked += len(feat.ids)
    assert checked > 100_000
