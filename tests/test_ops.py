"""Sample-group ops (ingest.ops): the kernels against pure-Python twins, Python ops, built-in ops, errors."""

import io
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from ingest import sample_pb2 as pb
from ingest._native import ops as K
from ingest._native.names import build_name_table
from ingest.convert import convert
from ingest.errors import ConfigError
from ingest.features import Schema, make_feature
from ingest.formats.protobuf import ProtobufFormat
from ingest.formats.text import TextFormat
from ingest.ops import DebugOP, DenseToSparseOP, FilterOP, OpError, OpStage, as_op
from ingest.ops.blocks import concat_blocks, take_rows
from ingest.ops.messages import GroupCodec
from ingest.sources import expand_paths, plan_units

from pbwire import group_records

quiet = {"log": lambda *_: None}


# -- helpers: blocks from real files, and blocks as plain samples --------------------------------------------
def read_blocks(path, fmt):
    unit = plan_units(expand_paths([str(path)]), splittable=False)[0]
    return list(fmt.read_unit(unit))


def text_blocks(tmp_path, lines, schema, name="in.txt"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return read_blocks(path, TextFormat(schema))


def samples_of(blk, schema):
    """Per group, per sample: id, labels, timestamp and every feature, aux ones reached through ``refer``."""
    groups = []
    for g in range(len(blk.group_offsets) - 1):
        group = []
        for r in range(int(blk.group_offsets[g]), int(blk.group_offsets[g + 1])):
            rows = [r]
            for tab in blk.tables[:-1]:
                rows.append(int(tab.refer[rows[-1]]))
            s = {
                "sid": bytes(blk.sid_bytes[blk.sid_offsets[r] : blk.sid_offsets[r + 1]]),
                "labels": blk.labels[r].tolist(),
                "ts": int(blk.timestamps[r]),
            }
            for t, tab in enumerate(blk.tables):
                for f, spec in enumerate(schema.sparse_in(t)):
                    a, b = int(tab.sp_offsets[f, rows[t]]), int(tab.sp_offsets[f, rows[t] + 1])
                    h = [0] * (b - a) if blk.sp_hkeys is None else blk.sp_hkeys[a:b].tolist()
                    s[spec.name] = list(zip(h, blk.sp_keys[a:b].tolist(), blk.sp_values[a:b].tolist()))
                for d, spec in enumerate(schema.dense_in(t)):
                    s[spec.name] = tab.dense[d][rows[t]].tolist()
            group.append(s)
        groups.append(group)
    return groups


# -- generated pb data: two tables, sample ids, timestamps, 128-bit ids ---------------------------------------
PB_SCHEMA = Schema(
    [
        make_feature("a", "sparse"),
        make_feature("b", "sparse"),
        make_feature("d", "dense", nvec=2),
        make_feature("u", "sparse", table=1),
        make_feature("e", "dense", table=1, nvec=1),
    ],
    1,
)

_key = st.integers(-(2**63), 2**63 - 1)
_value = st.sampled_from([1.0, 0.5, -2.0, 3.25])
_pairs = st.lists(st.tuples(_key, st.sampled_from([0, 0, 1, -1, 2**40]), _value), max_size=3)
_floats = st.floats(-8, 8, width=32)


@st.composite
def pb_groups(draw):
    groups = []
    for _ in range(draw(st.integers(1, 4))):
        aux = [{"u": draw(_pairs), "e": [draw(_floats)]} for _ in range(draw(st.integers(1, 3)))]
        with_ids = draw(st.booleans())
        with_ts = draw(st.booleans())
        samples = []
        for i in range(draw(st.integers(1, 4))):
            samples.append(
                {
                    "a": draw(_pairs),
                    "b": draw(_pairs),
                    "d": [draw(_floats), draw(_floats)],
                    "refer": draw(st.integers(0, len(aux) - 1)),
                    "label": draw(_floats),
                    "sid": draw(st.sampled_from(["x", "y\x01t", "z", ""])) + str(i) if with_ids else None,
                    "ts": draw(st.integers(0, 2**40)) if with_ts else 0,
                }
            )
        groups.append((samples, aux))
    return groups


def write_pb(path, groups):
    path.write_bytes(group_records(groups, ("a", "b", "d"), ("u", "e"), dense=("d", "e")))


def pb_block(tmp_path, groups):
    write_pb(tmp_path / "gen.pb", groups)
    blocks = read_blocks(tmp_path / "gen.pb", ProtobufFormat(PB_SCHEMA))
    assert len(blocks) == 1
    return blocks[0]


# -- twins of the kernels -----------------------------------------------------------------------------------
def twin_kept_groups(group_offsets, keep):
    offsets, groups = [0], []
    for g in range(len(group_offsets) - 1):
        n = sum(bool(keep[r]) for r in range(group_offsets[g], group_offsets[g + 1]))
        if n:
            groups.append(g)
            offsets.append(offsets[-1] + n)
    return offsets, groups


@given(sizes=st.lists(st.integers(1, 4), max_size=6), data=st.data())
def test_kept_groups_matches_twin(sizes, data):
    group_offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    keep = np.array(
        data.draw(st.lists(st.booleans(), min_size=int(group_offsets[-1]), max_size=int(group_offsets[-1]))), np.bool_
    )
    out_offsets = np.empty(len(sizes) + 1, np.int64)
    out_groups = np.empty(len(sizes), np.int64)
    ng = K.kept_groups(group_offsets, keep, out_offsets, out_groups)
    want_offsets, want_groups = twin_kept_groups(group_offsets.tolist(), keep.tolist())
    assert out_offsets[: ng + 1].tolist() == want_offsets and out_groups[:ng].tolist() == want_groups


@given(
    lengths=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=5), min_size=1, max_size=3).filter(
        lambda ls: len({len(x) for x in ls}) == 1
    ),
    data=st.data(),
)
def test_gather_csr_matches_twin(lengths, data):
    nrows = len(lengths[0])
    flat = [n for feat in lengths for n in feat]
    offsets = np.concatenate([[0], np.cumsum(flat)]).astype(np.int64)
    offsets = np.stack([offsets[f * nrows : (f + 1) * nrows + 1] for f in range(len(lengths))])
    src = np.arange(int(offsets[-1, -1]), dtype=np.int64) * 7 + 1
    rows = np.array(data.draw(st.lists(st.integers(0, nrows - 1), max_size=6)), np.int64)
    dst_offsets = np.zeros((len(lengths), len(rows) + 1), np.int64)
    pos = 0
    want = []
    for f in range(len(lengths)):  # twin: rows one by one, feature after feature
        dst_offsets[f, 0] = pos
        for i, r in enumerate(rows.tolist()):
            chunk = src[offsets[f, r] : offsets[f, r + 1]].tolist()
            want += chunk
            pos += len(chunk)
            dst_offsets[f, i + 1] = pos
    dst = np.full(pos, -1, np.int64)
    K.gather_csr(offsets, rows, src, dst_offsets, dst)
    assert dst.tolist() == want


@given(
    ids=st.lists(st.binary(max_size=5), max_size=8),
    tags=st.lists(st.binary(max_size=3), max_size=4),
    separator=st.sampled_from([1, 0x61, -1]),
)
def test_listed_tags_matches_twin(ids, tags, separator):
    tags = [t.decode("latin-1") for t in tags]  # str tags, written as UTF-8 in the table
    sid_bytes = np.frombuffer(b"".join(ids), np.uint8).copy()
    sid_offsets = np.concatenate([[0], np.cumsum([len(i) for i in ids])]).astype(np.int64)
    listed = np.empty(len(ids), np.bool_)
    n = K.listed_tags(sid_bytes, sid_offsets, separator, *build_name_table(tags), listed)
    encoded = {t.encode("utf-8") for t in tags}
    want = [(i.split(bytes([separator]))[0] if separator >= 0 else i) in encoded for i in ids]
    assert listed.tolist() == want and n == sum(want)


def twin_bucket(v, boundaries):
    return sum(1 for b in boundaries if b <= v)  # NaN compares False: bucket 0


@given(
    rows=st.lists(st.lists(st.floats(-10, 10, width=32) | st.just(float("nan")), min_size=2, max_size=2), max_size=5),
    boundaries=st.lists(st.floats(-10, 10), min_size=1, max_size=5).map(sorted),
    positional=st.booleans(),
)
def test_bucket_ids_match_twin(rows, boundaries, positional):
    dense = np.array(rows, np.float32).reshape(len(rows), 2)
    keys = np.empty(dense.size, np.int64)
    K.bucket_ids(dense, np.array(boundaries, np.float64), positional, keys)
    nb = len(boundaries)
    want = [
        j * (nb + 1) * positional + twin_bucket(float(v), boundaries)
        for row in dense.tolist()
        for j, v in enumerate(row)
    ]
    assert keys.tolist() == want


@given(groups=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=4), min_size=1, max_size=4))
def test_group_line_ranges_matches_twin(groups):
    # group g refers to next-table lines base_g + its values; bases leave gaps so ranges are found, not assumed
    refer, lo, hi, base = [], [], [], 0
    for vals in groups:
        lo.append(len(refer))
        refer += [base + v for v in vals]
        hi.append(len(refer))
        base += max(vals) + 2
    refer = np.array(refer, np.int64)
    next_lo, next_hi = np.empty(len(groups), np.int64), np.empty(len(groups), np.int64)
    local = np.full(len(refer), -1, np.int64)
    K.group_line_ranges(np.array(lo, np.int64), np.array(hi, np.int64), refer, next_lo, next_hi, local)
    for g in range(len(groups)):
        part = refer[lo[g] : hi[g]].tolist()
        assert (next_lo[g], next_hi[g]) == (min(part), max(part) + 1)
        assert local[lo[g] : hi[g]].tolist() == [v - min(part) for v in part]


def twin_message(blk, schema, g):
    """The SampleGroup of group ``g`` built field by field with the protobuf library (the encoder's twin)."""
    msg = pb.SampleGroup()
    r0, r1 = int(blk.group_offsets[g]), int(blk.group_offsets[g + 1])
    sids = [bytes(blk.sid_bytes[blk.sid_offsets[r] : blk.sid_offsets[r + 1]]).decode() for r in range(r0, r1)]
    if any(sids):
        msg.sample_ids.extend(sids)
    for r in range(r0, r1):
        msg.labels.add().values.extend(blk.labels[r].tolist())
    lo, hi = r0, r1
    for t, tab in enumerate(blk.tables):
        table = msg.feature_tables.add()
        nxt = None
        if tab.refer is not None:
            nxt = (int(tab.refer[lo:hi].min()), int(tab.refer[lo:hi].max()) + 1)
        for r in range(lo, hi):
            line = table.feature_lines.add()
            for f, spec in enumerate(schema.sparse_in(t)):
                a, b = int(tab.sp_offsets[f, r]), int(tab.sp_offsets[f, r + 1])
                if a == b:
                    continue
                feat = line.features.add(type=pb.kSparse, name=spec.name)
                for i in range(a, b):
                    fv = feat.values.add(key=int(blk.sp_keys[i]))
                    if blk.sp_values[i] != 1.0:
                        fv.value = float(blk.sp_values[i])
                    if blk.sp_hkeys is not None and blk.sp_hkeys[i] != 0:
                        fv.hkey = int(blk.sp_hkeys[i])
            for d, spec in enumerate(schema.dense_in(t)):
                row = tab.dense[d][r]
                if row.any():
                    line.features.add(type=pb.kDense, name=spec.name).values.add().vector.extend(row.tolist())
            if nxt is not None and tab.refer[r] - nxt[0]:
                line.refer = int(tab.refer[r] - nxt[0])
        if nxt is not None:
            lo, hi = nxt
    if blk.timestamps[r0:r1].any():
        for r in range(r0, r1):
            msg.extensions.add().extension["timestamp"] = str(int(blk.timestamps[r]))
    return msg


@given(groups=pb_groups())
def test_group_records_match_twin_messages(tmp_path, groups):
    blk = pb_block(tmp_path, groups)
    records, starts = GroupCodec(PB_SCHEMA).encode(blk)
    assert starts[-1] == len(records)
    for g in range(len(groups)):
        a, b = int(starts[g]), int(starts[g + 1])
        assert int.from_bytes(records[a : a + 4].tobytes(), "little") == b - a - 4
        assert pb.SampleGroup.FromString(records[a + 4 : b].tobytes()) == twin_message(blk, PB_SCHEMA, g)


@given(groups=pb_groups())
def test_python_op_keeping_everything_gives_back_the_same_samples(tmp_path, groups):
    blk = pb_block(tmp_path, groups)
    out = OpStage(PB_SCHEMA, [lambda group: True])(blk)
    assert samples_of(out, PB_SCHEMA) == samples_of(blk, PB_SCHEMA)
    assert out.source == blk.source and out.start == blk.start and out.end == blk.end
    if getattr(blk, "group_pos", None) is not None:
        assert out.group_pos.tolist() == blk.group_pos.tolist()


@given(groups=pb_groups(), data=st.data())
def test_filter_op_with_aux_table_matches_twin(tmp_path, groups, data):
    blk = pb_block(tmp_path, groups)
    before = samples_of(blk, PB_SCHEMA)
    ids = sorted({s["sid"] for g in before for s in g})
    listed = data.draw(st.lists(st.sampled_from(ids), max_size=3))
    op = FilterOP(listed)
    out = OpStage(PB_SCHEMA, [op])(blk)
    want = [[s for s in g if s["sid"].split(b"\x01")[0] not in listed] for g in before]
    assert samples_of(out, PB_SCHEMA) == [g for g in want if g]
    dropped = sum(len(g) for g in before) - sum(len(g) for g in want)
    assert op.counts() == {"passed": blk.nrows - dropped, "filtered": dropped}
    for t in range(len(out.tables) - 1):  # every refer still points at a line of the next table
        assert out.tables[t].refer.max(initial=-1) < out.tables[t + 1].nrows


# -- Python ops ------------------------------------------------------------------------------------------------
TEXT_SCHEMA = Schema([make_feature("item", "sparse"), make_feature("price", "dense", nvec=2)], 1)
TEXT_LINES = [
    "a0|ga|item@1,2:0.5|price@0.5,3|1|100",
    "a1|ga|item@3|price@7,20|0|101",
    "b0|gb|item@4|price@12,0|1|102",
    "c0||item@5:2|price@-1,1|0|103",
    "d0|gd|item@6|price@50,50|1|104",
    "d1|gd||price@0,0|0|105",
]


def test_python_op_dropping_groups_keeps_the_others_whole(tmp_path):
    (blk,) = text_blocks(tmp_path, TEXT_LINES, TEXT_SCHEMA)

    def no_b_or_d(group):
        return not group.sample_ids[0].startswith(("b", "d"))

    out = OpStage(TEXT_SCHEMA, [no_b_or_d])(blk)
    got = samples_of(out, TEXT_SCHEMA)
    assert [[s["sid"] for s in g] for g in got] == [[b"a0", b"a1"], [b"c0"]]
    assert got == [g for g in samples_of(blk, TEXT_SCHEMA) if g[0]["sid"][:1] in (b"a", b"c")]
    if getattr(blk, "group_pos", None) is not None:  # the kept groups keep their positions (reader state)
        assert out.group_pos.tolist() == [blk.group_pos[0], blk.group_pos[2]]


def test_python_op_modifying_values_and_removing_samples(tmp_path):
    (blk,) = text_blocks(tmp_path, TEXT_LINES, TEXT_SCHEMA)

    class Rescale:
        """Doubles item values, sets the first price element to 9, drops samples labelled 0."""

        def run(self, group):
            for line in group.feature_tables[0].feature_lines:
                for feat in line.features:
                    if feat.name == "item":
                        for v in feat.values:
                            v.value = (v.value if v.HasField("value") else 1.0) * 2
                    elif feat.name == "price":
                        feat.values[0].vector[0] = 9.0
            keep = [i for i, lab in enumerate(group.labels) if lab.values[0] == 1.0]
            for field in (group.sample_ids, group.labels, group.feature_tables[0].feature_lines):
                items = [field[i] for i in keep]
                del field[:]
                if field is group.sample_ids:
                    field.extend(items)
                else:
                    for item in items:
                        field.add().CopyFrom(item)
            del group.extensions[:]  # timestamps are per sample; dropping them sets them to 0
            return True

    out = OpStage(TEXT_SCHEMA, [Rescale()])(blk)
    got = samples_of(out, TEXT_SCHEMA)
    assert [[s["sid"] for s in g] for g in got] == [[b"a0"], [b"b0"], [b"d0"]]  # c0 (label 0) left group c empty
    a0 = got[0][0]
    assert a0["item"] == [(0, 1, 2.0), (0, 2, 1.0)]
    assert a0["price"] == [9.0, 3.0] and a0["ts"] == 0 and a0["labels"] == [1.0]
    assert got[2][0]["price"] == [9.0, 50.0]


def test_python_ops_in_a_row_share_one_trip_and_stop_at_the_first_false(tmp_path):
    (blk,) = text_blocks(tmp_path, TEXT_LINES, TEXT_SCHEMA)
    seen = []

    def first(group):
        seen.append(("first", group.sample_ids[0]))
        return group.sample_ids[0] != "b0"

    def second(group):
        seen.append(("second", group.sample_ids[0]))
        return True

    stage = OpStage(TEXT_SCHEMA, [first, second])
    assert len(stage.steps) == 1
    out = stage(blk)
    assert [("first", s) for s in ("a0", "b0", "c0", "d0")] == [x for x in seen if x[0] == "first"]
    assert [s for name, s in seen if name == "second"] == ["a0", "c0", "d0"]
    assert out.nrows == 5


def test_failing_op_error_names_op_source_offset_and_sample_id(tmp_path):
    (blk,) = text_blocks(tmp_path, TEXT_LINES, TEXT_SCHEMA)

    def explode_on_c(group):
        if group.sample_ids[0] == "c0":
            raise KeyError("no such thing")
        return True

    with pytest.raises(OpError) as info:
        OpStage(TEXT_SCHEMA, [explode_on_c])(blk)
    err = info.value
    text = str(err)
    assert "explode_on_c" in text and blk.source in text and "'c0'" in text and "KeyError" in text
    assert err.op.endswith("explode_on_c") and err.source == blk.source and err.group == 2
    assert err.sample_id == "c0" and err.block_offset == blk.start and isinstance(err.__cause__, KeyError)
    offset_of_c0 = (tmp_path / "in.txt").read_bytes().index(b"c0|")
    assert err.offset in (offset_of_c0, blk.start)  # the group's own offset where blocks record it
    assert f"byte {err.offset}" in text


@pytest.mark.parametrize("verdict", [None, 1, "yes"])
def test_op_returning_a_non_bool_is_an_error(tmp_path, verdict):
    (blk,) = text_blocks(tmp_path, TEXT_LINES, TEXT_SCHEMA)

    class Sloppy:
        def run(self, group):
            return verdict

    with pytest.raises(OpError, match=r"op .*Sloppy.*returned .*True \(keep the group\) or False"):
        OpStage(TEXT_SCHEMA, [Sloppy()])(blk)


def test_numpy_bool_is_accepted(tmp_path):
    (blk,) = text_blocks(tmp_path, TEXT_LINES, TEXT_SCHEMA)
    out = OpStage(TEXT_SCHEMA, [lambda g: np.bool_(g.sample_ids[0] == "a0")])(blk)
    assert out.nrows == 2


def test_op_leaving_a_group_that_does_not_read_back_is_an_error(tmp_path):
    (blk,) = text_blocks(tmp_path, TEXT_LINES, TEXT_SCHEMA)

    def widen(group):
        for feat in group.feature_tables[0].feature_lines[0].features:
            if feat.name == "price":
                feat.values[0].vector.append(1.0)  # 3 floats for a width-2 feature
        return True

    with pytest.raises(OpError, match=r"widen.*does not read back.*dense vector of 3 floats"):
        OpStage(TEXT_SCHEMA, [widen])(blk)


def test_every_group_dropped_gives_an_empty_block(tmp_path):
    (blk,) = text_blocks(tmp_path, TEXT_LINES, TEXT_SCHEMA)
    out = OpStage(TEXT_SCHEMA, [lambda g: False])(blk)
    assert out.nrows == 0 and out.group_offsets.tolist() == [0] and out.source == blk.source
    assert out.labels.shape == (0, 1) and out.tables[0].sp_offsets.shape == (1, 1)


def test_as_op_rejects_what_is_not_an_op():
    with pytest.raises(ConfigError, match="expected a callable"):
        as_op(42)
    with pytest.raises(ConfigError, match="got a class, expected an instance"):
        as_op(FilterOP)


# -- built-in ops on real files -----------------------------------------------------------------------------
def test_filter_op_on_converted_pb_with_aux_table_keeps_aux_features_right(tmp_path):
    lines = [
        "p0_0|p0|item@1;user@7||1",
        "p0_1|p0|item@2;user@7||0",
        "p0_2|p0|item@3;user@8||1",
        "p1_0|p1|item@4;user@9||1",
        "p1_1|p1|item@5;user@9||0",
        "solo|p2|item@6;user@10||1",
    ]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    convert([str(src)], str(tmp_path / "out.pb"), aux=["user"], **quiet)
    schema = Schema([make_feature("item", "sparse"), make_feature("user", "sparse", table=1)], 1)
    (blk,) = read_blocks(tmp_path / "out.pb", ProtobufFormat(schema))
    assert blk.tables[1].nrows == 4  # user lines: 7, 8 | 9 | 10
    out = OpStage(schema, [FilterOP(["p0_0", b"p1_0", "p1_1", "solo"])])(blk)
    got = samples_of(out, schema)
    assert [[(s["sid"], s["item"][0][1], s["user"][0][1]) for s in g] for g in got] == [
        [(b"p0_1", 2, 7), (b"p0_2", 3, 8)]
    ]
    assert out.tables[0].refer.tolist() == [0, 1]


def test_filter_op_compares_the_tag_before_ctrl_a(tmp_path):
    schema = Schema([make_feature("item", "sparse")], 1)
    (blk,) = text_blocks(tmp_path, ["news\x01123|g|item@1||1", "ads\x01124|g|item@2||1", "news|h|item@3||1"], schema)
    assert [s["sid"] for g in samples_of(OpStage(schema, [FilterOP(["news"])])(blk), schema) for s in g] == [
        b"ads\x01124"
    ]
    whole = OpStage(schema, [FilterOP(["news"], separator=None)])(blk)
    assert [s["sid"] for g in samples_of(whole, schema) for s in g] == [b"news\x01123", b"ads\x01124"]


def test_dense_to_sparse_op_writes_bucket_ids(tmp_path):
    schema = Schema(
        [
            make_feature("item", "sparse"),
            make_feature("price", "dense", nvec=2),
            make_feature("price_bucket", "sparse"),
        ],
        1,
    )
    (blk,) = text_blocks(tmp_path, TEXT_LINES, schema)
    out = OpStage(schema, [DenseToSparseOP(dense="price", sparse="price_bucket", boundaries=[1, 10, 50])])(blk)
    got = [s for g in samples_of(out, schema) for s in g]
    # price rows: [0.5,3] [7,20] [12,0] [-1,1] [50,50] [0,0] -> buckets = boundaries <= value
    assert [[k for _, k, _ in s["price_bucket"]] for s in got] == [[0, 1], [1, 2], [2, 0], [0, 1], [3, 3], [0, 0]]
    assert all(v == 1.0 for s in got for _, _, v in s["price_bucket"])
    assert [s["item"] for s in got] == [s["item"] for g in samples_of(blk, schema) for s in g]
    positional = OpStage(schema, [DenseToSparseOP("price", "price_bucket", [1, 10, 50], positional=True)])(blk)
    assert [k for _, k, _ in samples_of(positional, schema)[0][0]["price_bucket"]] == [0, 4 + 1]


def test_dense_to_sparse_op_checks_its_features():
    schema = Schema([make_feature("price", "dense", nvec=1), make_feature("aux_ids", "sparse", table=1)], 1)
    with pytest.raises(ConfigError, match="'nope' is not declared as a sparse feature"):
        OpStage(schema, [DenseToSparseOP("price", "nope", [1.0])])
    with pytest.raises(ConfigError, match="in table 1, dense feature 'price' in table 0"):
        OpStage(schema, [DenseToSparseOP("price", "aux_ids", [1.0])])
    with pytest.raises(ConfigError, match="not a parsed dense feature"):
        OpStage(schema, [DenseToSparseOP("aux_ids", "aux_ids", [1.0])])
    with pytest.raises(ConfigError, match="ascending"):
        DenseToSparseOP("price", "x", [3, 1])
    with pytest.raises(ConfigError, match="ascending"):
        DenseToSparseOP("price", "x", [math.nan])


def test_debug_op_prints_every_nth_group_and_keeps_everything(tmp_path):
    (blk,) = text_blocks(tmp_path, TEXT_LINES, TEXT_SCHEMA)
    out = io.StringIO()
    op = DebugOP(every=2, out=out)
    stage = OpStage(TEXT_SCHEMA, [op])
    assert stage(blk) is blk
    text = out.getvalue()
    assert text.startswith(f"DebugOP: group 0 ({blk.source}, byte ")
    assert ": 2 samples\n  sample 0: id='a0' labels=1 ts=100\n    item@1,2:0.5; price@0.5,3\n" in text
    assert "DebugOP: group 2 " in text and "id='c0'" in text and "item@5:2; price@-1,1" in text
    assert "group 1 " not in text and "group 3 " not in text
    stage(blk)  # counting goes on across blocks: groups 4..7, so 4 and 6 print
    assert "DebugOP: group 4 " in out.getvalue() and "DebugOP: group 6 " in out.getvalue()
    with pytest.raises(ConfigError, match="every=0"):
        DebugOP(every=0)


def test_builtin_and_python_ops_run_in_the_order_added(tmp_path):
    schema = Schema(
        [
            make_feature("item", "sparse"),
            make_feature("price", "dense", nvec=2),
            make_feature("price_bucket", "sparse"),
        ],
        1,
    )
    (blk,) = text_blocks(tmp_path, TEXT_LINES, schema)
    seen = []

    def record(group):
        for line in group.feature_tables[0].feature_lines:
            for feat in line.features:
                if feat.name == "price_bucket":
                    seen.append([v.key for v in feat.values])
        return True

    out = OpStage(
        schema, [FilterOP(["a0", "a1", "b0", "c0"]), DenseToSparseOP("price", "price_bucket", [1, 10]), record]
    )(blk)
    assert seen == [[2, 2], [0, 0]] and out.nrows == 2


# -- block surgery ------------------------------------------------------------------------------------------
@given(groups=pb_groups(), cut=st.integers(0, 4))
def test_concat_blocks_of_split_records_equals_one_decode(tmp_path, groups, cut):
    blk = pb_block(tmp_path, groups)
    codec = GroupCodec(PB_SCHEMA)
    records, starts = codec.encode(blk)
    k = int(starts[min(cut, len(groups))])
    data = records.tobytes()
    parts = [codec.decode(part, "mem") for part in (data[:k], data[k:]) if part]
    assert samples_of(concat_blocks(parts), PB_SCHEMA) == samples_of(codec.decode(data, "mem"), PB_SCHEMA)


@given(groups=pb_groups(), data=st.data())
def test_take_rows_matches_twin(tmp_path, groups, data):
    blk = pb_block(tmp_path, groups)
    keep = data.draw(st.lists(st.booleans(), min_size=blk.nrows, max_size=blk.nrows))
    out = take_rows(blk, np.array(keep, np.bool_))
    flat = iter(keep)
    want = [[s for s in g if next(flat)] for g in samples_of(blk, PB_SCHEMA)]
    assert samples_of(out, PB_SCHEMA) == [g for g in want if g]


def test_reader_add_op_end_to_end(tmp_path):
    """``reader.add_op``: a Python op and FilterOP run before batching, and a state taken mid-way resumes
    the filtered stream exactly."""
    from collections import Counter

    from conftest import flatten, key_of, make_reader
    from ingest import synthetic

    path = tmp_path / "ads.txt"  # 64 groups: few enough for the kernels run as Python (test_house)
    synthetic.write(path, 600, seed=1)

    def even_groups(group):
        return int(group.sample_ids[0].split("_")[0][2:]) % 2 == 0  # sample ids are pv<group>_<k>

    dropped = [b"pv0_0", b"pv2_1"]

    def make():
        reader = make_reader([path], batch_size=(32,), threads=(2,), enable_state=True)
        return synthetic.declare(reader).add_op(even_groups).add_op(FilterOP(dropped))

    whole = make()
    whole.startup()
    with whole:
        want = Counter(key_of(s) for b in whole for s in flatten(b))
    sids = [k[0] for k in want]
    assert sids and all(int(s.split(b"_")[0][2:]) % 2 == 0 for s in sids)
    assert not set(dropped) & set(sids) and b"pv0_1" in sids
    first = make()
    first.startup()
    got = Counter()
    with first:
        for i, batch in enumerate(first):
            got.update(key_of(s) for s in flatten(batch))
            if i == 4:
                break
        state = first.state()
    assert 0 < sum(got.values()) < sum(want.values())  # the state is taken mid-way
    rest = make().restore(state)
    rest.startup()
    with rest:
        got.update(key_of(s) for b in rest for s in flatten(b))
    assert got == want
    with pytest.raises(ConfigError):
        make_reader([path]).add_op(42)


def test_a_python_op_warns_where_protobuf_runs_in_pure_python(monkeypatch):
    """Where protobuf has no C core (free-threaded CPython), a Python op parses each group in pure Python, ~65x slower:
    adding one says so; a built-in op does not."""
    import warnings

    from google.protobuf.internal import api_implementation

    def pure_python_warnings(op):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            as_op(op)
        return [w for w in caught if "pure-Python" in str(w.message)]

    built_in = FilterOP([b"x"])
    monkeypatch.setattr(api_implementation, "Type", lambda: "python")
    with pytest.warns(RuntimeWarning, match=r"add_op\(op=.*lambda.*pure-Python.*Built-in ops"):
        as_op(lambda group: True)
    assert pure_python_warnings(built_in) == []
    monkeypatch.setattr(api_implementation, "Type", lambda: "upb")
    assert pure_python_warnings(lambda group: True) == []
