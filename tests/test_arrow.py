"""Batches as Arrow record batches, and Parquet through ``ingest convert`` both ways."""

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

import ingest
import ingest.parquet
from ingest import synthetic
from ingest.arrow import record_schema
from ingest.cli import main as cli
from ingest.convert import convert

from conftest import flatten, make_reader
from pbwire import group_records

quiet = {"log": lambda *_: None}
USER = ["uid", "age", "gender", "clk_hist", "cate_pref", "user_emb"]  # what --aux auto picks in synthetic samples


def arrow_samples(record_batch):
    """Per-row dicts of a record batch in ``conftest.flatten``'s form (a missing timestamp is 0)."""
    rows = record_batch.to_pylist()
    names = record_batch.schema.names
    sparse = [n[: -len(".ids")] for n in names if n.endswith(".ids")]
    dense = [n for n in names if n not in ("sample_id", "labels", "timestamp") and "." not in n]
    out = []
    for row in rows:
        out.append(
            {
                "sid": row["sample_id"].encode(),
                "labels": row["labels"],
                "ts": row.get("timestamp", 0),
                "sparse": {n: list(zip(row[n + ".ids"], row[n + ".values"])) for n in sparse},
                "dense": {n: row[n] for n in dense},
            }
        )
    return out


def batches(paths, file_type="txt", aux=(), batch_size=128, **options):
    reader = synthetic.declare(
        make_reader(paths, file_type=file_type, batch_size=(batch_size,), **options), aux=aux, serialized=True
    )
    return list(reader.startup())


@pytest.fixture(scope="module")
def ads(tmp_path_factory):
    """300 synthetic samples as text, and as pb with the user features in table 1."""
    folder = tmp_path_factory.mktemp("arrow")
    text = folder / "ads.txt"
    synthetic.write(text, 300, seed=5)
    convert([str(text)], str(folder / "ads.pb"), aux="auto", threads=1, **quiet)
    return text, folder / "ads.pb"


def test_to_arrow_of_text_batches_holds_their_samples_without_the_padding(ads):
    got = batches([ads[0]])
    assert [b.size for b in got] == [128, 128, 44] and got[-1].rows == 128
    for batch in got:
        record_batch = batch.to_arrow()
        assert record_batch.num_rows == batch.size
        assert arrow_samples(record_batch) == flatten(batch)


def test_to_arrow_of_pb_batches_expands_the_aux_table_per_sample(ads):
    got = batches([ads[1]], file_type="pb", aux=USER)
    assert got[0].table_of("clk_hist") == 1 and got[0].table_rows[1] < got[0].rows
    text = [s for b in batches([ads[0]]) for s in flatten(b)]
    from_arrow = [s for b in got for s in arrow_samples(b.to_arrow())]
    assert from_arrow == [s for b in got for s in flatten(b)]
    assert from_arrow == text


def test_to_arrow_wraps_table_0_arrays_without_a_copy(ads):
    batch = batches([ads[0]])[-1]  # the short, padded one
    record_batch = batch.to_arrow()
    item = batch["item"]
    ids, values = record_batch.column("item.ids"), record_batch.column("item.values")
    assert ids.buffers()[1].address == item.offsets.ctypes.data
    assert ids.buffers()[3].address == item.ids.ctypes.data
    assert values.buffers()[3].address == item.values.ctypes.data
    assert record_batch.column("labels").buffers()[2].address == batch.labels.ctypes.data
    assert record_batch.column("user_emb").buffers()[2].address == batch["user_emb"].ctypes.data
    assert record_batch.column("sample_id").buffers()[2].address == batch.sid_bytes.ctypes.data
    assert record_batch.column("timestamp").buffers()[1].address == batch.timestamps.ctypes.data


def test_to_arrow_schema_is_the_record_schema_of_the_reader(ads):
    reader = synthetic.declare(make_reader([ads[1]], file_type="pb", batch_size=(128,)), aux=USER, serialized=True)
    batch = next(iter(reader.startup()))
    reader.shutdown()
    want = record_schema(reader.schema)
    assert batch.to_arrow().schema == want
    assert want.field("labels").type == pa.list_(pa.float32(), 2)
    assert want.field("clk_hist.ids").type == pa.large_list(pa.int64())


def _pb_with_hkeys(path, hkey):
    samples = [{"refer": 0, "sid": "a", "item": [(hkey, 5, 2.0), (0, 6, 1.0)]}, {"refer": 0, "sid": "", "item": []}]
    path.write_bytes(group_records([(samples, [{}])], ["item"], []))
    reader = ingest.DataReader("h", [str(path)], file_type="pb").batch_size(4)
    reader.feature(name="item", type="sparse")  # serialized=False: (hkey, key) pairs
    return list(reader.startup())[0]


def test_to_arrow_keeps_the_keys_of_pairs_whose_hkeys_are_0(tmp_path):
    batch = _pb_with_hkeys(tmp_path / "h.pb", 0)
    assert batch["item"].ids.shape == (2, 2)
    record_batch = batch.to_arrow()
    assert record_batch.column("item.ids").to_pylist() == [[5, 6], []]
    assert record_batch.column("item.values").to_pylist() == [[2.0, 1.0], []]
    assert record_batch.column("sample_id").to_pylist() == ["a", ""]


def test_to_arrow_refuses_128_bit_ids(tmp_path):
    batch = _pb_with_hkeys(tmp_path / "h.pb", 7)
    with pytest.raises(ingest.ConfigError, match=r"'item' holds 128-bit ids \(hkey != 0\)"):
        batch.to_arrow()


def test_to_arrow_refuses_sample_ids_that_are_not_utf8(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"\xff\xfe||item@1||1\n")
    reader = make_reader([path], sparse=["item"], batch_size=(4,))
    batch = list(reader.startup())[0]
    with pytest.raises(ingest.ConfigError, match="sample ids are not UTF-8"):
        batch.to_arrow()


def test_to_arrow_of_samples_without_labels(tmp_path):
    path = tmp_path / "z.txt"
    path.write_text("s1|g|item@3:0.5||\ns2|g|||\n")
    reader = make_reader([path], sparse=["item"], label_count=0, batch_size=(4,))
    batch = list(reader.startup())[0]
    record_batch = batch.to_arrow()
    assert record_batch.column("labels").type == pa.list_(pa.float32(), 0)
    assert record_batch.column("labels").to_pylist() == [[], []]
    assert record_batch.column("item.ids").to_pylist() == [[3], []]
    assert np.array_equal(record_batch.column("item.values").flatten().to_numpy(), [0.5])


# -- Parquet through ingest convert ------------------------------------------------------------------
def text_samples(path, **options):
    return [s for b in batches([path], batch_size=256, **options) for s in flatten(b)]


def test_text_to_parquet_to_text_gives_the_same_samples(ads, tmp_path, monkeypatch):
    monkeypatch.setattr(ingest.parquet, "ROW_GROUP_ROWS", 100)
    table = tmp_path / "ads.parquet"
    summary = convert([str(ads[0])], str(table), threads=2, **quiet)
    assert summary["from"] == "txt" and summary["to"] == "parquet"
    meta = pq.ParquetFile(table).metadata
    assert (meta.num_rows, meta.num_row_groups) == (300, 3)
    assert meta.row_group(0).column(0).compression == "ZSTD"
    want = text_samples(ads[0])
    assert [s for rb in pq.read_table(table).to_batches() for s in arrow_samples(rb)] == want
    convert([str(table)], str(tmp_path / "back.txt"), **quiet)
    assert text_samples(tmp_path / "back.txt") == want
    convert([str(table)], str(tmp_path / "back.pb"), **quiet)
    assert [s for b in batches([tmp_path / "back.pb"], file_type="pb") for s in flatten(b)] == want


def test_pb_with_an_aux_table_to_parquet_has_a_row_per_sample(ads, tmp_path):
    convert([str(ads[1])], str(tmp_path / "pb.parquet"), threads=1, **quiet)
    convert([str(ads[0])], str(tmp_path / "txt.parquet"), threads=1, **quiet)
    from_pb, from_text = (pq.read_table(tmp_path / f"{k}.parquet") for k in ("pb", "txt"))
    assert from_pb.num_rows == 300 and sorted(from_pb.schema.names) == sorted(from_text.schema.names)
    assert from_pb.select(from_text.schema.names).equals(from_text)


_keys = st.integers(-(2**63), 2**63 - 1)
_floats = st.floats(-1e6, 1e6, width=32)


@st.composite
def plain_tables(draw):
    """A table as another tool writes it: list<int64> ids (nulls among the rows), float64 values or none,
    variable-list dense features and labels of one width, a string id and a timestamp or not."""
    n = draw(st.integers(0, 12))
    columns, want = {}, [{"sparse": {}, "dense": {}} for _ in range(n)]
    sids = draw(st.lists(st.text("abcXYZ019_-", max_size=6), min_size=n, max_size=n))
    columns["sample_id"] = pa.array(sids, pa.string())
    label_width = draw(st.integers(1, 3))
    labels = draw(st.lists(st.lists(_floats, min_size=label_width, max_size=label_width), min_size=n, max_size=n))
    columns["labels"] = pa.array(labels, pa.list_(pa.float64()))
    stamps = draw(st.one_of(st.none(), st.lists(st.integers(0, 2**40), min_size=n, max_size=n)))
    if stamps is not None:
        columns["timestamp"] = pa.array(stamps, pa.int64())
    for s, sample in enumerate(want):
        sample.update(sid=sids[s].encode(), labels=labels[s], ts=stamps[s] if stamps else 0)
    for f in range(draw(st.integers(1, 3))):
        rows = draw(st.lists(st.one_of(st.none(), st.lists(_keys, max_size=4)), min_size=n, max_size=n))
        columns[f"s{f}.ids"] = pa.array(rows, pa.list_(pa.int64()))
        with_values = draw(st.booleans())
        values = [[draw(_floats) for _ in r or []] if with_values else [1.0] * len(r or []) for r in rows]
        if with_values:
            columns[f"s{f}.values"] = pa.array(values, pa.list_(pa.float64()))
        for sample, ids, vals in zip(want, rows, values):
            sample["sparse"][f"s{f}"] = list(zip(ids or [], vals))
    width = draw(st.integers(1, 3))
    dense = draw(st.lists(st.lists(_floats, min_size=width, max_size=width), min_size=n, max_size=n))
    columns["d"] = pa.array(dense, pa.list_(pa.float32()))
    for sample, row in zip(want, dense):
        sample["dense"]["d"] = row
    return pa.table(columns), want, label_width, width


@settings(max_examples=40)
@given(plain_tables(), st.sampled_from(["txt", "pb"]))
def test_parquet_of_plain_pyarrow_with_list_columns_converts(case, to):
    table, want, label_width, width = case
    with tempfile.TemporaryDirectory() as folder:
        pq.write_table(table, f"{folder}/plain.parquet")
        convert([f"{folder}/plain.parquet"], f"{folder}/out.{to}", threads=1, **quiet)
        sparse = [n[: -len(".ids")] for n in table.schema.names if n.endswith(".ids")]
        reader = make_reader(
            [f"{folder}/out.{to}"], sparse=sparse, dense={"d": width}, label_count=label_width, file_type=to
        )
        got = [s for b in reader.startup() for s in flatten(b)]
    assert got == want


def _write(path, **columns):
    pq.write_table(pa.table({"labels": pa.array([[1.0], [0.0]], pa.list_(pa.float32(), 1)), **columns}), path)


@pytest.mark.parametrize(
    "columns, message",
    [
        ({"item.ids": pa.array([["a"], []])}, r"column 'item.ids' is list<element: string>; expected a list of int64"),
        ({"dt": pa.array(["x", "y"])}, r"column 'dt' is string; expected a dense feature, a list of float32"),
        ({"item.values": pa.array([[1.0], []])}, r"column 'item.values' has no 'item.ids' beside it"),
        ({"timestamp": pa.array([1.5, 2.0])}, r"column 'timestamp' is double; expected an integer timestamp"),
        (
            {"item.ids": pa.array([[1], [2, 3]]), "item.values": pa.array([[1.0], [2.0]])},
            r"column 'item.values', row 1: 1 values for 2 ids; expected one value per id",
        ),
        ({"d": pa.array([[1.0, 2.0], [3.0]])}, r"column 'd', row 1: 1 numbers; expected 2"),
        (
            {"timestamp": pa.array([1, 2**63], pa.uint64())},
            r"column 'timestamp' \(rows 0..1\): Integer value 9223372036854775808 not in range",
        ),
        ({"item.ids": pa.array([[1], [None]])}, r"column 'item.ids' \(rows 0..1\): a null inside a list"),
        (
            {"item.ids": pa.array([[1], [2**64 - 1]], pa.list_(pa.uint64()))},
            r"column 'item.ids' \(rows 0..1\): Integer value 18446744073709551615 not in range.*; expected values "
            r"that fit int64",
        ),
    ],
)
def test_a_column_that_does_not_fit_is_named_with_its_file(tmp_path, columns, message):
    path = tmp_path / "bad.parquet"
    _write(path, **columns)
    with pytest.raises(ingest.ConfigError, match=f"^{path}: {message}"):
        convert([str(path)], str(tmp_path / "out.txt"), threads=1, **quiet)
    assert not (tmp_path / "out.txt").exists()


def test_parquet_without_labels_or_not_parquet_at_all_is_refused(tmp_path):
    pq.write_table(pa.table({"item.ids": pa.array([[1]])}), tmp_path / "nolabels.parquet")
    with pytest.raises(ingest.ConfigError, match="nolabels.parquet: no column 'labels'"):
        convert([str(tmp_path / "nolabels.parquet")], str(tmp_path / "out.txt"), **quiet)
    (tmp_path / "text.parquet").write_text("a||item@1||1\n")
    with pytest.raises(ingest.SourceError, match="text.parquet: not a Parquet file"):
        convert([str(tmp_path / "text.parquet")], str(tmp_path / "out.txt"), **quiet)


def test_parquet_names_and_flags(ads, tmp_path):
    with pytest.raises(ingest.ConfigError, match="Parquet compresses its own pages; name it without .zst"):
        convert([str(ads[0])], str(tmp_path / "x.parquet.zst"), dst="parquet", **quiet)
    with pytest.raises(ingest.ConfigError, match="--aux applies to text -> pb only"):
        convert([str(ads[0])], str(tmp_path / "x.parquet"), aux="auto", **quiet)
    with pytest.raises(ingest.ConfigError, match=r"give --from/--to txt\|pb\|spb \(or parquet\)"):
        convert([str(ads[0])], str(tmp_path / "x.table"), **quiet)
    assert cli.main(["convert", str(ads[0]), str(tmp_path / "out") + "/", "--to", "parquet"]) == 0
    assert pq.read_metadata(tmp_path / "out" / "ads.parquet").num_rows == 300
    assert cli.main(["convert", str(tmp_path / "out" / "ads.parquet"), str(tmp_path / "back.x"), "--to", "txt"]) == 0
    assert text_samples(tmp_path / "back.x") == text_samples(ads[0])


def test_a_bad_row_is_counted_from_the_start_of_its_file(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest.parquet, "ROW_GROUP_ROWS", 3)
    ids = [[r] for r in range(10)]
    values = [[1.0]] * 7 + [[1.0, 2.0]] + [[1.0]] * 2
    labels = pa.array([[1.0]] * 10, pa.list_(pa.float32(), 1))
    table = pa.table({"labels": labels, "item.ids": ids, "item.values": values})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=4)
    with pytest.raises(ingest.ConfigError, match="t.parquet: column 'item.values', row 7: 2 values for 1 ids"):
        convert([str(tmp_path / "t.parquet")], str(tmp_path / "out.pb"), **quiet)


def test_a_record_batch_keeps_its_arrays_after_the_batch_is_released(ads):
    reader = synthetic.declare(make_reader([ads[0]], batch_size=(100,)), serialized=True).startup()
    first = next(reader)
    record_batch = first.to_arrow()
    want = arrow_samples(record_batch)
    assert want == flatten(first)
    first.release()
    for batch in reader:  # their buffers come from the pool the released batch went back to
        batch.release()
    assert arrow_samples(record_batch) == want


@st.composite
def grouped_text(draw):
    """Text lines of sample groups whose samples share the user features ``u`` (sparse) and ``ud`` (dense)."""
    lines = []
    for g in range(draw(st.integers(1, 5))):
        user = draw(st.lists(st.tuples(_keys, _floats), min_size=1, max_size=3))
        emb = draw(st.lists(_floats, min_size=2, max_size=2))
        for s in range(draw(st.integers(1, 4))):
            item = draw(st.lists(st.tuples(_keys, _floats), max_size=3))
            sparse = ";".join(
                f"{n}@" + ",".join(f"{k}:{v!r}" for k, v in p) for n, p in (("u", user), ("i", item)) if p
            )
            dense = "ud@" + ",".join(repr(v) for v in emb)
            lines.append(f"s{g}_{s}|g{g}|{sparse}|{dense}|{draw(_floats)!r}|{draw(st.integers(0, 99))}")
    return "\n".join(lines) + "\n"


@settings(max_examples=30)
@given(grouped_text(), st.integers(1, 7), st.booleans())
def test_to_arrow_of_pb_batches_with_split_groups_and_padding_equals_their_samples(text, batch_size, pad):
    with tempfile.TemporaryDirectory() as folder:
        (path := Path(folder) / "g.txt").write_text(text)
        convert([str(path)], f"{folder}/g.pb", aux=["u", "ud"], threads=1, **quiet)
        reader = ingest.DataReader("g", [f"{folder}/g.pb"], file_type="pb").batch_size(batch_size).pad(pad)
        reader.feature(name="i", type="sparse", serialized=True)
        reader.feature(name="u", type="sparse", table=1, serialized=True)
        reader.feature(name="ud", type="dense", nvec=2, table=1)
        for batch in reader.startup():
            assert arrow_samples(batch.to_arrow()) == flatten(batch)
