"""The pb/spb decoder against the protobuf library, and its errors."""

import ast
import random
import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st

import ingest
from ingest import sample_pb2 as pb
from ingest._native.columns import ChunkRows, Columns
from ingest.features import Schema, make_feature
from ingest.formats import protobuf as pf
from ingest.formats.base import KeptRows, Room
from ingest.formats.protobuf import ProtobufDecodeError, ProtobufFormat
from ingest.pipeline.batcher import BatchBuilder, cut_batches
from ingest.sources import FileRange

from conftest import ROOT, as_plain, flatten
from pbwire import encode, expected_samples, frame, length_delimited, tag, varint
from regions import fill_columns_with_garbage, room_to_spare

SPARSE = {"a": 0, "b": 1, "c": 2}
DENSE_NVEC = {"d": 3, "e": 2}
DENSE_TABLE = {"d": 0, "e": 1}


@pytest.fixture(autouse=True)
def _scratch_full_of_garbage(monkeypatch):
    """The decoder's scratch and columns start as garbage, not as the zeros of fresh memory: a value the
    kernel leaves unwritten then shows up in the batches instead of passing as 0."""
    init = pf._Scratch.__init__

    def init_with_garbage(self, *args):
        init(self, *args)
        for name, array in vars(self).items():
            if name not in ("tab_rows", "st"):  # the kernel's counters start at 0 by contract
                array.view(np.uint8).fill(0xA5)

    monkeypatch.setattr(pf._Scratch, "__init__", init_with_garbage)
    fill_columns_with_garbage(monkeypatch)


def test_generated_code_matches_schema(tmp_path):
    """ingest/sample_pb2.py is what protoc makes of schemas/sample.proto (run scripts/gen-protos after edits)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT / 'schemas'}",
            f"--python_out={tmp_path}",
            str(ROOT / "schemas" / "sample.proto"),
        ],
        check=True,
    )
    tree = ast.parse((tmp_path / "sample_pb2.py").read_text())
    fresh = next(
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile"
    )
    assert fresh == pb.DESCRIPTOR.serialized_pb


# -- generated messages --------------------------------------------------------------------------

_int64 = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-3, 300))
_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def _feature(draw, name):
    feat = pb.Feature(name=name)
    if name in DENSE_NVEC or (name == "zz" and draw(st.booleans())):
        feat.type = pb.kDense
        nvec = DENSE_NVEC.get(name, 2)
        feat.values.add().vector.extend(draw(st.lists(_f32, min_size=nvec, max_size=nvec)))
    else:
        feat.type = pb.kSparse
        for _ in range(draw(st.integers(0, 3))):
            v = feat.values.add(key=draw(_int64))
            if draw(st.booleans()):
                v.value = draw(_f32)
            if draw(st.integers(0, 3)) == 0:
                v.hkey = draw(_int64)
    return feat


@st.composite
def _line(draw, names, refer_to):
    line = pb.FeatureLine()
    chosen = draw(st.lists(st.sampled_from(names), max_size=4))
    dense_done = set()
    for name in chosen:
        if name in DENSE_NVEC:
            if name in dense_done:
                continue
            dense_done.add(name)
        line.features.append(draw(_feature(name)))
    if refer_to:
        line.refer = draw(st.integers(0, refer_to - 1))
    if draw(st.integers(0, 4)) == 0:
        line.reserve.extend(draw(st.lists(st.integers(-5, 5), max_size=3)))
    return line


@st.composite
def _group(draw, label_count):
    n = draw(st.integers(0, 4))
    g = pb.SampleGroup()
    if draw(st.booleans()):
        g.sample_ids.extend(draw(st.lists(st.text(max_size=5), min_size=n, max_size=n)))
    for _ in range(n):
        g.labels.add().values.extend(draw(st.lists(_f32, min_size=label_count, max_size=label_count + 2)))
    ntables = draw(st.integers(1, 3))
    sizes = [n] + [draw(st.integers(0, 3)) for _ in range(ntables - 1)]
    names = [["a", "d", "zz", "b"], ["b", "e", "zz"], ["c", "zz"]]
    for k in range(ntables):
        nxt = sizes[k + 1] if k + 1 < ntables else 0
        table = g.feature_tables.add()
        for _ in range(sizes[k]):
            table.feature_lines.append(draw(_line(names[k], nxt)))
    if draw(st.booleans()):
        for _ in range(n):
            ext = g.extensions.add()
            if draw(st.integers(0, 3)):
                ext.extension["timestamp"] = str(draw(st.integers(-(2**40), 2**40)))
            if draw(st.booleans()):
                ext.extension["other"] = "x"
    if draw(st.integers(0, 3)) == 0:
        g.props.add().values.append(1.0)
    return g


@st.composite
def _simple(draw, label_count):
    s = pb.SampleSimple(sample_id=draw(st.text(max_size=5)))
    s.label.values.extend(draw(st.lists(_f32, min_size=label_count, max_size=label_count + 1)))
    s.feature_line.CopyFrom(draw(_line(["a", "d", "zz"], 0)))
    return s


def _schema(label_count, tables, cutoff, mask):
    specs = [make_feature(n, "sparse", table=t, cutoff=cutoff.get(n, 0)) for n, t in SPARSE.items() if t < tables]
    specs += [
        make_feature(n, "dense", nvec=DENSE_NVEC[n], table=DENSE_TABLE[n], mask=mask if n == "d" else None)
        for n in DENSE_NVEC
        if DENSE_TABLE[n] < tables
    ]
    return Schema(specs, label_count)


def _decode(
    tmp_path,
    data,
    schema,
    simple,
    chunk_bytes,
    batch_size=3,
    pad=False,
    split_group=True,
    errors=None,
    spare=Room.SPARE,
):
    """The samples the reader's kernels make of ``data``; ``spare`` 0 gives the sparse columns no room to spare,
    so that blocks are cut short where a feature's ids outgrow what the unit had so far."""
    path = tmp_path / ("x.spb" if simple else "x.pb")
    path.write_bytes(data)
    fmt = ProtobufFormat(
        schema, simple=simple, chunk_bytes=chunk_bytes, on_skip=errors.append if errors is not None else None
    )
    blocks = fmt.read_unit(FileRange(0, str(path), 0, None, len(data), None))
    out = []
    with room_to_spare(spare):
        for batch in cut_batches(blocks, BatchBuilder(schema, batch_size, pad), split_group=split_group):
            batch.validate()
            out.extend(flatten(batch))
    return out


def _expected(records, schema, simple, mask):
    sparse = {s.name: s.table for s in schema.sparse}
    dense = {s.name: (s.nvec, s.mask, s.table) for s in schema.dense}
    cutoff = {s.name: s.cutoff for s in schema.sparse}
    return as_plain(expected_samples(records, simple, sparse, dense, schema.label_count, cutoff))


def _plain_f32(samples):
    """Round every float through float32, as the decoder stores them."""
    f = lambda v: float(np.float32(v))  # noqa: E731
    for s in samples:
        s["labels"] = [f(v) for v in s["labels"]]
        s["sparse"] = {n: [(k, f(v)) for k, v in p] for n, p in s["sparse"].items()}
        s["dense"] = {n: [f(v) for v in vals] for n, vals in s["dense"].items()}
    return samples


@given(
    data=st.data(),
    label_count=st.integers(0, 2),
    tables=st.integers(1, 3),
    simple=st.booleans(),
    seed=st.integers(0, 2**32),
    chunk_bytes=st.sampled_from([16, 200, 1 << 16]),
    batch=st.tuples(st.integers(1, 6), st.booleans(), st.booleans()),
    mask=st.sampled_from([None, "101"]),
    cut=st.integers(-2, 2),
    spare=st.sampled_from([0, Room.SPARE]),
)
def test_decoder_matches_protobuf(
    tmp_path, data, label_count, tables, simple, seed, chunk_bytes, batch, mask, cut, spare
):
    """Whatever the encoding variant, the kernel delivers what the protobuf library parses."""
    rng = random.Random(seed)
    make = _simple(label_count) if simple else _group(label_count)
    messages = data.draw(st.lists(make, max_size=5))
    encoded = [encode(m, rng) for m in messages]
    parsed = [(pb.SampleSimple if simple else pb.SampleGroup).FromString(e) for e in encoded]
    schema = _schema(label_count, tables, {"a": cut}, mask)
    batch_size, pad, split_group = batch
    if not split_group:
        batch_size = max(batch_size, 4)  # groups have up to 4 samples
    got = _decode(tmp_path, frame(encoded), schema, simple, chunk_bytes, batch_size, pad, split_group, spare=spare)
    want = _plain_f32(_expected(parsed, schema, simple, mask))
    assert got == want


def _value(key, value=None, tail=b""):
    body = tag(1, 0) + varint(key & (2**64 - 1))
    if value is not None:
        body += tag(2, 5) + struct.pack("<f", value)
    return length_delimited(3, body + tail)


_CANONICAL = tag(1, 0) + varint(1) + length_delimited(2, b"a")


@pytest.mark.parametrize(
    "feature",
    [
        _CANONICAL + _value(1, 0.5) + _value(2) + _value(-3, 2.0),  # the fast path throughout
        _CANONICAL + _value(1, 0.5) + length_delimited(2, b"b") + _value(2),  # a later name wins
        _CANONICAL + _value(1) + tag(1, 0) + varint(1) + _value(2**40),  # type repeated
        _CANONICAL + _value(1, 0.5, tail=tag(4, 0) + varint(9)) + _value(2),  # hkey in a value
        _CANONICAL + _value(1, 0.5, tail=tag(9, 0) + varint(9)) + _value(2),  # unknown field in a value
        _CANONICAL + _value(1, 0.5) + tag(7, 5) + b"\0\0\0\0" + _value(2),  # unknown field in the feature
        _CANONICAL + length_delimited(3, tag(2, 5) + struct.pack("<f", 1.5) + tag(1, 0) + varint(4)),  # value first
        _CANONICAL + length_delimited(3, tag(1, 0) + varint(4) + tag(1, 0) + varint(6)),  # last key wins
        tag(1, 0)
        + varint(1)
        + length_delimited(2, b"b" * 200)
        + length_delimited(2, b"a")
        + _value(1),  # 2-byte length
    ],
)
def test_canonical_fast_path_agrees_with_protobuf(tmp_path, feature):
    """Features that start in the canonical shape and then leave it decode as the library says."""
    record = _record_with_feature(feature)
    schema = _schema(1, 2, {}, None)
    got = _decode(tmp_path, frame([record]), schema, False, 1 << 16)
    want = _plain_f32(_expected([pb.SampleGroup.FromString(record)], schema, False, None))
    assert got == want
    name = pb.SampleGroup.FromString(record).feature_tables[0].feature_lines[0].features[0].name
    assert any(got[0]["sparse"].values()) == (name == "a")  # not vacuous: a declared feature delivers


@given(
    ids=st.lists(st.integers(0, 10**5), min_size=0, max_size=12),
    data=st.data(),
    filled=st.integers(0, 1 << 20),
    consumed=st.integers(0, 3),
    value_bytes=st.sampled_from([2, 4]),  # text, pb
    high_keys=st.booleans(),
)
def test_region_room_matches_twin(ids, data, filled, consumed, value_bytes, high_keys):
    """The regions of a chunk (``region_room``) and the count of what it decoded (``region_decoded``) against
    numpy formulas: ids a byte seen so far, scaled to the chunk, a fifth more and the spare, at least the floor."""
    n = len(ids)
    # a value takes value_bytes or more: the ids came from at least that many bytes each
    seen = data.draw(st.integers(value_bytes * sum(ids), 1 << 30) if sum(ids) else st.sampled_from([0, 1 << 20]))
    floor = np.array(data.draw(st.lists(st.integers(0, 1 << 16), min_size=n, max_size=n)), np.int64)
    room = Room(n, value_bytes, high_keys)
    room.ids[:], room.bytes, room.floor[:] = ids, seen, floor
    cols = room.columns(filled)
    first, cur, lim, keys = cols.first, cols.cur, cols.lim, cols.keys
    if seen:
        want = (np.array(ids, np.int64) * (1.2 * filled / seen)).astype(np.int64) + room.SPARE
    else:
        want = np.full(n, filled // (value_bytes * max(n, 1)) + room.SPARE, np.int64)
    want = np.maximum(want, floor)
    assert lim.tolist() == np.cumsum(want).tolist() and (lim - first).tolist() == want.tolist()
    assert cur.tolist() == first.tolist() and len(keys) == len(cols.values) == int(want.sum())
    assert len(cols.hkeys) == (len(keys) if high_keys else 0)
    wrote = [data.draw(st.integers(0, int(w))) for w in want]
    cur += np.array(wrote, np.int64)
    room.decoded(consumed)
    assert room.ids.tolist() == [a + w for a, w in zip(ids, wrote)] and room.bytes == seen + consumed
    assert room.floor.tolist() == ([0] * n if consumed else floor.tolist())


def twin_offsets(first, ends, feats, nrows, cutoff, keys, hkeys, values):
    """One table's sparse offsets and the ids and values they keep, in lists: each row of feature ``feats[j]`` is
    ``ends[r - 1, f]:ends[r, f]`` of its region from ``first[f]``, cut to its first (cutoff > 0) or last (< 0)
    ``abs(cutoff[j])`` values, the kept ones one after the other from ``first[f]``."""
    offsets, kept = [], []
    for f, cut in zip(feats, cutoff):
        row_offsets, a, w, ids = [first[f]], first[f], first[f], []
        for r in range(nrows):
            b = ends[r, f]
            take = list(range(a, b))
            if cut:
                take = take[:cut] if cut > 0 else take[len(take) + cut :] if len(take) > -cut else take
            ids += [(keys[i], hkeys[i] if len(hkeys) else None, values[i]) for i in take]
            w += len(take)
            row_offsets.append(w)
            a = b
        offsets.append(row_offsets)
        kept.append(ids)
    return offsets, kept


@given(
    tab_rows=st.lists(st.integers(0, 9), min_size=1, max_size=3),
    widths=st.lists(st.integers(1, 3), max_size=4),
    labels=st.integers(1, 3),
    groups=st.integers(0, 9),
    start=st.integers(0, 1 << 40),
    high=st.booleans(),
    data=st.data(),
)
def test_trim_rows_matches_twin(tab_rows, widths, labels, groups, start, high, data):
    """What a Block keeps of a chunk's decoded rows (``KeptRows.of``: the parts sized, then ``trim_rows``, for pb
    and text) against slices of them, as the front ends took them before: every table's sparse offsets, ids and
    values cut as cutoffs say, dense features of any table and columns, refers, labels, timestamps, sample ids,
    groups."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    tables, cap = len(tab_rows), 12  # the scratch holds more rows than the chunk decoded
    nrows = tab_rows[0]
    width = sum(widths)
    dense_cols, col = [], 0
    for w in widths:
        dense_cols.append((data.draw(st.integers(0, tables - 1)), col, w))
        col += w
    dense_cols.sort(key=lambda c: c[0])  # in table order, as the front end lists them
    nsid = data.draw(st.integers(0, 30))
    # sparse features: per table a few, numbered among the chunk's in any order, each with its region
    per_table = [data.draw(st.integers(0, 3)) for _ in range(tables)]
    order = rng.permutation(sum(per_table)).tolist()
    table_sparse = [order[sum(per_table[:t]) : sum(per_table[: t + 1])] for t in range(tables)]
    cutoff = [[data.draw(st.integers(-2, 2)) for _ in feats] for feats in table_sparse]
    nsparse = len(order)
    ends = rng.integers(-9, 9, (cap, max(nsparse, 1)))
    first = np.zeros(max(nsparse, 1), np.int64)
    total = 0
    for t, feats in enumerate(table_sparse):
        for f in feats:
            first[f] = total
            for r in range(tab_rows[t]):
                total += int(rng.integers(0, 4))
                ends[r, f] = total
            total += int(rng.integers(0, 3))  # room the region did not fill
    keys = rng.integers(-(2**62), 2**62, total)
    hkeys = rng.integers(-(2**62), 2**62, total)
    values = rng.random(total, np.float32)
    want_offsets = [
        twin_offsets(first, ends, feats, tab_rows[t], cut, keys, hkeys if high else [], values)
        for t, (feats, cut) in enumerate(zip(table_sparse, cutoff))
    ]
    cols = Columns(keys.copy(), hkeys.copy(), values.copy(), first, first.copy(), first.copy()).checked()
    rows = ChunkRows(
        ends,
        np.array(tab_rows, np.int64),
        rng.integers(-5, 5, (tables, cap)),
        rng.random((tables, cap, max(width, 1)), np.float32),
        rng.random((cap, labels), np.float32),
        rng.integers(-(2**40), 2**40, cap),
        rng.integers(0, 255, 40).astype(np.uint8),
        np.sort(rng.integers(0, nsid + 1, cap + 1)),
        rng.integers(0, 100, cap + 1),
        rng.integers(0, 1000, cap + 1),
    ).checked()
    ngroups = min(groups, nrows)
    dense_at = np.cumsum([0] + [tab_rows[t] * w for t, _, w in dense_cols])
    refer_at = np.cumsum([0] + tab_rows[:-1])
    table_arrays = [np.array(feats, np.int64) for feats in table_sparse]
    kept = KeptRows(table_arrays, cutoff, np.array(dense_cols, np.int64).reshape(-1, 3), labels)
    parts, offsets, dense, refers = kept.of(list(tab_rows), rows.plain(), cols.plain(), high, nsid, ngroups, start)
    for t, (want, want_ids) in enumerate(want_offsets):
        assert offsets[t].shape == (len(table_sparse[t]), tab_rows[t] + 1)
        assert offsets[t].tolist() == want
        for f, ids in zip(table_sparse[t], want_ids):
            at = range(first[f], first[f] + len(ids))
            got = [(cols.keys[i], cols.hkeys[i] if high else None, cols.values[i]) for i in at]
            assert got == ids
    for (t, b, w), a in zip(dense_cols, dense_at):
        got = parts.dense[a : a + tab_rows[t] * w].reshape(tab_rows[t], w)
        assert np.array_equal(got, rows.dense[t, : tab_rows[t], b : b + w])
    assert [d.tolist() for d in dense] == [rows.dense[t, : tab_rows[t], b : b + w].tolist() for t, b, w in dense_cols]
    for t in range(tables - 1):
        assert parts.refer[refer_at[t] : refer_at[t + 1]].tolist() == rows.refer[t, : tab_rows[t]].tolist()
        assert refers[t].tolist() == rows.refer[t, : tab_rows[t]].tolist()
    assert np.array_equal(parts.labels, rows.labels[:nrows])
    assert parts.timestamps.tolist() == rows.timestamps[:nrows].tolist()
    assert parts.sid_bytes.tolist() == rows.sid_bytes[:nsid].tolist()
    assert parts.sid_offsets.tolist() == rows.sid_off[: nrows + 1].tolist()
    assert parts.group_offsets.tolist() == rows.group_start[:ngroups].tolist() + [nrows]
    assert parts.group_pos.tolist() == (rows.group_pos[:ngroups] + start).tolist()


def test_columns_outgrown_mid_unit_cut_blocks_short_and_lose_nothing(tmp_path):
    """Each sparse feature gets a region of a chunk's columns sized from the ids seen so far in the unit: a
    feature that first shows up late, or grows, outgrows it.  The block is then cut before that record,
    and a record with more ids than its region gets the room it needs; no id is lost or moved."""
    records = []
    for i in range(200):
        g = pb.SampleGroup()
        g.labels.add().values.append(1)
        f = g.feature_tables.add().feature_lines.add().features.add(type=pb.kSparse, name="b" if i < 100 else "a")
        for k in range(1 + (i % 7) * (10 if i > 150 else 1)):
            f.values.add(key=i * 100 + k, value=k / 2)
        records.append(g.SerializeToString())
    schema = _schema(1, 1, {}, None)
    want = _plain_f32(_expected([pb.SampleGroup.FromString(r) for r in records], schema, False, None))
    data = frame(records)
    blocks = {}
    for spare in (0, Room.SPARE):
        assert _decode(tmp_path, data, schema, False, 4096, spare=spare) == want
        with room_to_spare(spare):
            unit = FileRange(0, str(tmp_path / "x.pb"), 0, None, len(data), None)
            blocks[spare] = len(list(ProtobufFormat(schema, chunk_bytes=4096).read_unit(unit)))
    assert blocks[0] > blocks[Room.SPARE]  # not vacuous: without room to spare, blocks were cut short


def test_hkeys_come_out_as_pairs(tmp_path):
    g = pb.SampleGroup()
    g.labels.add().values.append(1)
    f = g.feature_tables.add().feature_lines.add().features.add(type=pb.kSparse, name="a")
    f.values.add(key=-1, hkey=2**63 - 1)
    f.values.add(key=5)
    schema = Schema([make_feature("a", "sparse")], 1)
    path = tmp_path / "h.pb"
    path.write_bytes(frame([g.SerializeToString()]))
    reader = ingest.DataReader("h", [str(path)], file_type="pb").feature("a", "sparse")
    [batch] = reader.startup().read_all()
    assert batch["a"].ids.tolist() == [[2**63 - 1, -1], [0, 5]]
    assert schema.tables == 1


def test_high_keys_that_first_come_late_in_a_chunk_leave_earlier_ids_whole(tmp_path):
    """The decoder writes high keys only once a chunk has one: the ids before it must still pair with 0."""
    groups = []
    for keys in ([(7, 0), (8, 0)], [(-1, 3), (9, 0)], [(10, 0)]):
        g = pb.SampleGroup()
        g.labels.add().values.append(1)
        f = g.feature_tables.add().feature_lines.add().features.add(type=pb.kSparse, name="a")
        for key, hkey in keys:
            v = f.values.add(key=key)
            if hkey:
                v.hkey = hkey
        groups.append(g.SerializeToString())
    path = tmp_path / "late.pb"
    path.write_bytes(frame(groups))
    reader = ingest.DataReader("h", [str(path)], file_type="pb").feature("a", "sparse").batch_size(3)
    [batch] = reader.startup().read_all()
    assert batch["a"].ids.tolist() == [[0, 7], [0, 8], [3, -1], [0, 9], [0, 10]]
    assert batch["a"].offsets.tolist() == [0, 2, 4, 5]


# -- golden multi-table batches (FORMATS.md section 3) ---------------------------------------------


def _aux_group(refers, aux_keys, main_key0=0):
    g = pb.SampleGroup()
    t0, t1 = g.feature_tables.add(), g.feature_tables.add()
    for i, r in enumerate(refers):
        g.labels.add().values.append(float(i))
        g.sample_ids.append(f"s{main_key0 + i}")
        line = t0.feature_lines.add(refer=r)
        line.features.add(type=pb.kSparse, name="item").values.add(key=main_key0 + i)
    for key in aux_keys:
        t1.feature_lines.add().features.add(type=pb.kSparse, name="user").values.add(key=key)
    return g


def _aux_reader(tmp_path, groups, batch_size, **options):
    path = tmp_path / "aux.pb"
    path.write_bytes(frame([g.SerializeToString() for g in groups]))
    reader = ingest.DataReader("aux", [str(path)], file_type=ingest.parsers.pb).batch_size(batch_size)
    reader.feature("item", "sparse", serialized=True).feature("user", "sparse", table=1, serialized=True)
    for method, arg in options.items():
        getattr(reader, method)(arg)
    return reader.startup().read_all()


def test_xdl_worked_case_padding(tmp_path):
    """B=8: a group of 3 (refer 0,0,1; aux U0,U1) then one of 2 (refer 0,0; aux V0)."""
    [batch] = _aux_reader(tmp_path, [_aux_group([0, 0, 1], [100, 101]), _aux_group([0, 0], [200], 10)], 8)
    batch.validate()
    assert batch.size == 5 and batch.rows == 8
    assert batch["user"].ids.tolist() == [100, 101, 200]
    assert batch["user"].offsets.tolist() == [0, 1, 2, 3, 3]  # aux rows U0, U1, V0 and the padding row
    assert batch.indicators[0].tolist() == [0, 0, 1, 2, 2, 3, 3, 3]
    assert batch.table_rows == [8, 4]


def test_xdl_worked_case_split_group(tmp_path):
    """B=2 over one group of 4 samples with refer [0,0,1,1]: two batches, one aux row each."""
    batches = _aux_reader(tmp_path, [_aux_group([0, 0, 1, 1], [100, 101])], 2)
    assert len(batches) == 2
    for batch, user in zip(batches, [100, 101]):
        batch.validate()
        assert batch["user"].ids.tolist() == [user]
        assert batch.indicators[0].tolist() == [0, 0]


def test_split_group_tail_refers_to_later_aux_lines(tmp_path):
    """A group cut at a batch boundary: the tail's indicators subtract its min refer (the FIX)."""
    groups = [_aux_group([0], [7]), _aux_group([0, 1, 2, 2, 1], [100, 101, 102], 10)]
    batches = _aux_reader(tmp_path, groups, 3, pad=False)
    assert [b.size for b in batches] == [3, 3]
    first, second = batches
    assert first["user"].ids.tolist() == [7, 100, 101] and first.indicators[0].tolist() == [0, 1, 2]
    assert second["user"].ids.tolist() == [101, 102] and second.indicators[0].tolist() == [1, 1, 0]
    flat = [s for b in batches for s in flatten(b)]
    assert [s["sparse"]["user"] for s in flat] == [[(k, 1.0)] for k in [7, 100, 101, 102, 102, 101]]


def test_split_group_false_moves_whole_groups(tmp_path):
    groups = [_aux_group([0, 0], [1]), _aux_group([0, 1, 1], [2, 3], 10)]
    batches = _aux_reader(tmp_path, groups, 4, split_group=False, pad=False)
    assert [b.size for b in batches] == [2, 3]
    assert batches[1]["user"].ids.tolist() == [2, 3] and batches[1].indicators[0].tolist() == [0, 1, 1]


def test_text_with_aux_schema_gives_empty_aux_features():
    from conftest import SAMPLES

    reader = ingest.DataReader("t", [str(SAMPLES / "xdl_example.txt")]).label_count(1).batch_size(4)
    reader.feature("user_id", "sparse", table=1)
    for batch in reader.startup().read_all():
        batch.validate()
        assert len(batch["user_id"].ids) == 0
        assert batch.indicators[0].max() < batch.table_rows[1]


# -- errors ----------------------------------------------------------------------------------------


def _one_sample(key=1, name="a"):
    g = pb.SampleGroup()
    g.labels.add().values.append(1.0)
    g.feature_tables.add().feature_lines.add().features.add(type=pb.kSparse, name=name).values.add(key=key)
    return g.SerializeToString()


def _record_with_feature(feature_bytes):
    line = length_delimited(1, feature_bytes)
    table = length_delimited(1, line)
    return length_delimited(2, length_delimited(1, struct.pack("<f", 1.0))) + length_delimited(3, table)


BAD_RECORDS = {
    "MISSING_REQUIRED": _record_with_feature(length_delimited(2, b"a")),
    "MISSING_KEY": _record_with_feature(
        tag(1, 0) + varint(1) + length_delimited(2, b"a") + length_delimited(3, tag(2, 5) + struct.pack("<f", 2.0))
    ),
    "WRONG_WIRE_TYPE": tag(2, 0) + varint(5),
    "MALFORMED": length_delimited(2, b"") + tag(3, 2) + varint(50) + b"xx",
    "TYPE_MISMATCH": _record_with_feature(
        tag(1, 0)
        + varint(2)
        + length_delimited(2, b"a")
        + length_delimited(3, length_delimited(3, struct.pack("<f", 1.0)))
    ),
    "BAD_ENUM": _record_with_feature(tag(1, 0) + varint(7) + length_delimited(2, b"a")),
    "LINE_COUNT": length_delimited(2, b"") + length_delimited(2, b"") + length_delimited(3, length_delimited(1, b"")),
    "BAD_REFER": pb.SampleGroup(
        labels=[pb.Label()],
        feature_tables=[
            pb.FeatureTable(feature_lines=[pb.FeatureLine(refer=3)]),
            pb.FeatureTable(feature_lines=[pb.FeatureLine()]),
        ],
    ).SerializeToString(),
    "SAMPLE_ID_COUNT": pb.SampleGroup(
        sample_ids=["x", "y"], labels=[pb.Label()], feature_tables=[pb.FeatureTable(feature_lines=[pb.FeatureLine()])]
    ).SerializeToString(),
}


@pytest.mark.parametrize("kind", sorted(BAD_RECORDS))
def test_bad_record_is_located_and_skipped_alone(tmp_path, kind):
    records = [_one_sample(1), BAD_RECORDS[kind], _one_sample(3)]
    data = frame(records)
    schema = Schema([make_feature("a", "sparse"), make_feature("u", "sparse", table=1)], 0)
    errors = []
    got = _decode(tmp_path, data, schema, False, 1 << 16, errors=errors)
    assert [s["sparse"]["a"] for s in got] == [[(1, 1.0)], [(3, 1.0)]]
    [err] = errors
    assert isinstance(err, ProtobufDecodeError) and err.kind == kind
    assert err.record == 1
    start = 4 + len(records[0])
    assert start <= err.offset < start + 4 + len(records[1])
    assert str(tmp_path / "x.pb") in str(err) and "record 1" in str(err)
    with pytest.raises(ProtobufDecodeError) as raised:
        _decode(tmp_path, data, schema, False, 1 << 16)
    assert raised.value.kind == kind


@pytest.mark.parametrize(
    "tail,kind", [(b"\x05\x00", "TRUNCATED"), (b"\x10\x00\x00\x00abc", "TRUNCATED"), (b"\xff\xff\xff\x7f", "TOO_LONG")]
)
def test_unframed_tail(tmp_path, tail, kind):
    """A cut or oversized final record is an error (XDL ignored it); the records before it are delivered."""
    data = frame([_one_sample(1), _one_sample(2)]) + tail
    schema = Schema([make_feature("a", "sparse")], 0)
    errors = []
    got = _decode(tmp_path, data, schema, False, 64, errors=errors)
    assert [s["sparse"]["a"] for s in got] == [[(1, 1.0)], [(2, 1.0)]]
    [err] = errors
    assert err.kind == kind and err.record == 2 and err.offset == len(data) - len(tail)


def test_dense_width_and_spb_required(tmp_path):
    g = pb.SampleGroup()
    g.labels.add()
    g.feature_tables.add().feature_lines.add().features.add(type=pb.kDense, name="d").values.add().vector.extend([1, 2])
    schema = Schema([make_feature("d", "dense", nvec=3)], 0)
    errors = []
    assert _decode(tmp_path, frame([g.SerializeToString()]), schema, False, 1 << 16, errors=errors) == []
    assert errors[0].kind == "DENSE_WIDTH" and errors[0].feature == "d" and "3 floats" in str(errors[0])
    errors = []
    simple = pb.SampleSimple(sample_id="x", label=pb.Label(values=[1]))  # no feature_line
    assert _decode(tmp_path, frame([simple.SerializePartialToString()]), schema, True, 1 << 16, errors=errors) == []
    assert errors[0].kind == "MISSING_REQUIRED" and "SampleSimple.feature_line" in str(errors[0])


def test_max_record_bytes_option(tmp_path):
    path = tmp_path / "big.pb"
    path.write_bytes(frame([_one_sample(1), _one_sample(2)]))
    reader = ingest.DataReader("m", [str(path)], file_type="pb").feature("a", "sparse", serialized=True)
    reader.label_count(0).max_record_bytes(8).on_error("skip")
    with pytest.warns(RuntimeWarning, match="skipped 1"):
        assert reader.startup().read_all() == []
    assert reader.stats()["errors_by_kind"] == {"TOO_LONG": 1}
    with pytest.raises(ingest.ConfigError):
        ingest.DataReader("t", [str(path)]).max_record_bytes(8).startup()


# -- byte ranges of uncompressed files ------------------------------------------------------------------


def _numbered_groups(n):
    records = []
    for i in range(n):
        g = pb.SampleGroup()
        for j in range(1 + i % 3):
            g.labels.add().values.append(float(j))
            g.sample_ids.append(f"g{i}s{j}")
            line = g.feature_tables.add().feature_lines.add() if j == 0 else g.feature_tables[0].feature_lines.add()
            line.features.add(type=pb.kSparse, name="a").values.add(key=i * 10 + j, value=0.5)
        records.append(g.SerializeToString())
    return records


def _sids(path, threads, unit_bytes=None, errors=None):
    reader = ingest.DataReader("r", [str(path)], file_type="pb").feature("a", "sparse").threads(threads)
    reader.deterministic(True).batch_size(7)
    if unit_bytes:
        reader.unit_bytes(unit_bytes)
    if errors is not None:
        reader.on_error("skip")
    out = [batch.sample_id(r) for batch in reader.startup() for r in range(batch.size)]
    if errors is not None:
        errors.extend(reader.stats()["first_errors"])
    return out


def test_large_files_split_at_record_boundaries(tmp_path):
    path = tmp_path / "big.pb"
    path.write_bytes(frame(_numbered_groups(400)))
    whole = _sids(path, 1)
    assert len(whole) == sum(1 + i % 3 for i in range(400))
    assert _sids(path, 2, unit_bytes=1024) == whole  # ~20 byte ranges, records cut nowhere


def test_split_file_with_a_bad_length_reports_it_once(tmp_path):
    records = _numbered_groups(300)
    data = frame(records[:150]) + struct.pack("<I", 1 << 30) + b"\0" * 64 + frame(records[150:])
    path = tmp_path / "bad.pb"
    path.write_bytes(data)
    whole_errors, split_errors = [], []
    with pytest.warns(RuntimeWarning):
        whole = _sids(path, 1, errors=whole_errors)
    with pytest.warns(RuntimeWarning):
        split = _sids(path, 2, unit_bytes=1024, errors=split_errors)
    assert split == whole and len(whole) == sum(1 + i % 3 for i in range(150))
    assert len(split_errors) == 1 and split_errors == whole_errors
    assert "record 150" in split_errors[0]


def _naive_starts(data, max_record):
    """The twin of record_starts: walk the prefixes one by one."""
    starts, pos = [], 0
    while pos + 4 <= len(data):
        n = struct.unpack_from("<I", data, pos)[0]
        if n > max_record or pos + 4 + n > len(data):
            break
        starts.append(pos)
        pos += 4 + n
    return starts + ([pos] if pos < len(data) else [])


@given(
    sizes=st.lists(st.integers(0, 300), max_size=30),
    tail=st.sampled_from([b"", b"\x01", b"\x09\0\0\0ab", b"\xff\xff\xff\x7f" + b"x" * 8]),
    chunk=st.sampled_from([16, 64, 1 << 16]),
)
def test_record_starts_matches_a_walk_of_the_prefixes(tmp_path, sizes, tail, chunk):
    from ingest.formats.protobuf import record_starts

    data = b"".join(struct.pack("<I", n) + bytes([n % 251]) * n for n in sizes) + tail
    path = tmp_path / "f.pb"
    path.write_bytes(data)
    with open(path, "rb") as f:
        got = record_starts(f, len(data), 1 << 20, chunk_bytes=chunk)
    assert got.tolist() == _naive_starts(data, 1 << 20)
