"""Batches as Arrow record batches, and Parquet through ``ingest convert`` both ways."""

import numpy as np
import pyarrow as pa
import pytest

import ingest
from ingest import synthetic
from ingest.arrow import record_schema
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
