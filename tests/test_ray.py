"""Ray Data: ``ingest.ray.read_samples`` on a local Ray of 2 CPUs delivers every sample of a reader once, as the
reader does, through read tasks that are runs of its work units."""

import collections
import subprocess
import sys
import threading

import numpy as np
import pyarrow as pa
import pytest
import ray
import torch

import ingest
import ingest.ray
from ingest import synthetic
from ingest.arrow import record_schema
from ingest.convert import convert

from conftest import flatten, key_of, make_reader

USER = ["uid", "age", "gender", "clk_hist", "cate_pref", "user_emb"]  # the user features, in table 1 of the pb files


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def pb_files(tmp_path_factory):
    """Three pb files of synthetic samples, the user features in table 1."""
    folder = tmp_path_factory.mktemp("ray")
    paths = []
    for k, n in enumerate((1200, 700, 900)):
        text = folder / f"p{k}.txt"
        synthetic.write(text, n, seed=k + 1)
        paths.append(folder / f"p{k}.pb")
        convert([str(text)], str(paths[-1]), aux=USER, log=lambda *_: None)
    return paths


def _reader(paths, file_type="pb", aux=USER, **options):
    return synthetic.declare(make_reader(paths, file_type=file_type, batch_size=(200,), **options), aux=aux)


def _samples_of_reader(reader):
    return collections.Counter(key_of(s) for b in reader.startup() for s in flatten(b))


def _samples_of_rows(table):
    """The rows of an Arrow table of ``read_samples`` in ``conftest.flatten``'s form, as ``key_of`` keys."""
    names = table.schema.names
    sparse = [n[: -len(".ids")] for n in names if n.endswith(".ids")]
    dense = [n for n in names if n not in ("sample_id", "labels", "timestamp") and "." not in n]
    keys = collections.Counter()
    for row in table.to_pylist():
        sample = {
            "sid": row["sample_id"].encode(),
            "labels": row["labels"],
            "ts": row["timestamp"],
            "sparse": {n: list(zip(row[n + ".ids"], row[n + ".values"])) for n in sparse},
            "dense": {n: row[n] for n in dense},
        }
        keys[key_of(sample)] += 1
    return keys


def _samples_of_dataset(ds):
    got = collections.Counter()
    for table in ds.iter_batches(batch_size=500, batch_format="pyarrow"):
        got += _samples_of_rows(table)
    return got


def test_read_samples_of_several_files_delivers_each_sample_once_as_the_reader_does(local_ray, pb_files):
    ds = ingest.ray.read_samples(_reader(pb_files))
    want = _samples_of_reader(_reader(pb_files))
    assert sum(want.values()) == 2800
    assert ds.schema().base_schema == record_schema(_reader(pb_files).schema)
    assert _samples_of_dataset(ds) == want
    assert ds.count() == 2800


def test_a_file_cut_into_byte_ranges_is_read_once_across_read_tasks(local_ray, synthetic_file):
    reader = _reader([synthetic_file], file_type="txt", aux=(), unit_bytes=256 * 1024)
    units = ingest.ray.SampleDatasource(reader)._units
    assert len(units) >= 12 and all(u.url == units[0].url for u in units) and units[1].start > 0
    ds = ingest.ray.read_samples(reader, override_num_blocks=5)
    want = _samples_of_reader(_reader([synthetic_file], file_type="txt", aux=()))
    assert sum(want.values()) == 3000
    assert _samples_of_dataset(ds) == want


@pytest.mark.parametrize("parallelism", [1, 3, 7, 1000])
def test_read_tasks_are_runs_of_consecutive_units_at_most_parallelism_of_them(pb_files, parallelism):
    reader = _reader(pb_files, unit_bytes=64 * 1024)
    source = ingest.ray.SampleDatasource(reader)
    tasks = source.get_read_tasks(parallelism)
    runs = [task.read_fn.units for task in tasks]
    assert len(source._units) > 7 and len(tasks) == min(parallelism, len(source._units))
    assert [u for run in runs for u in run] == source._units  # every unit once, in plan order
    assert max(map(len, runs)) - min(map(len, runs)) <= 1
    for task, run in zip(tasks, runs):
        assert task.metadata.input_files == tuple(dict.fromkeys(u.url for u in run))
        assert task.schema == record_schema(reader.schema)


def test_a_shard_of_the_reader_gives_the_samples_of_that_shard(local_ray, pb_files):
    ds = ingest.ray.read_samples(_reader(pb_files).shard(1, 2))
    want = _samples_of_reader(_reader(pb_files).shard(1, 2))
    assert sum(want.values()) == 700  # the second of the three files
    assert _samples_of_dataset(ds) == want


def test_map_batches_sees_the_rows_of_every_sample(local_ray, pb_files):
    def ids_per_sample(table):
        return pa.table(
            {
                "sample_id": table["sample_id"],
                "clk_hist": pa.compute.list_value_length(table["clk_hist.ids"]),
                "item": pa.compute.list_element(table["item.ids"], 0),
            }
        )

    ds = ingest.ray.read_samples(_reader(pb_files)).map_batches(ids_per_sample, batch_format="pyarrow")
    got = sorted((r["sample_id"].encode(), r["clk_hist"], r["item"]) for r in ds.take_all())
    want = []
    for batch in _reader(pb_files).startup():
        want += [(s["sid"], len(s["sparse"]["clk_hist"]), s["sparse"]["item"][0][0]) for s in flatten(batch)]
    assert got == sorted(want)


def test_iter_torch_batches_with_torch_collate_gives_the_arrays_of_ingest_torch(local_ray, pb_files):
    ds = ingest.ray.read_samples(_reader(pb_files[:2]))
    want = collections.Counter()
    for batch in _reader(pb_files[:2]).startup():
        for s in flatten(batch):
            want[s["sid"], repr((s["labels"], s["sparse"]["clk_hist"], s["dense"]["user_emb"]))] += 1
    got = collections.Counter()
    for batch in ds.iter_torch_batches(batch_size=128, collate_fn=ingest.ray.TorchCollate()):
        n = batch["labels"].shape[0]
        assert batch["labels"].dtype.is_floating_point and batch["clk_hist.ids"].dtype == torch.int64
        assert batch["clk_hist.offsets"].shape == (n + 1,) and batch["clk_hist.offsets"][0] == 0
        assert batch["user_emb"].shape == (n, 8)
        sid = batch["sample_id_bytes"].numpy().tobytes()
        sid_at, at = batch["sample_id_offsets"].numpy(), batch["clk_hist.offsets"].numpy()
        ids, values = batch["clk_hist.ids"].numpy(), batch["clk_hist.values"].numpy()
        for r in range(n):
            pairs = list(zip(ids[at[r] : at[r + 1]].tolist(), values[at[r] : at[r + 1]].tolist()))
            content = (batch["labels"][r].tolist(), pairs, batch["user_emb"][r].tolist())
            got[sid[sid_at[r] : sid_at[r + 1]], repr(content)] += 1
    assert sum(got.values()) == 1900
    assert got == want


def test_a_started_reader_is_refused_with_what_to_give_instead(pb_files):
    reader = _reader(pb_files)
    with reader.startup():
        with pytest.raises(ingest.ConfigError, match=r"read_samples\(reader 'test'\): give a reader that has not"):
            ingest.ray.read_samples(reader)


@pytest.mark.parametrize(
    "option, message",
    [
        (lambda r: r.epochs(2), r"epochs\(n\) other than 1"),
        (lambda r: r.save_state_every(10, "/tmp/unused.state"), "enable_state / restore"),
        (lambda r: r.drop_last(True), r"drop_last\(True\)"),
    ],
)
def test_options_a_read_task_cannot_honour_are_refused(pb_files, option, message):
    with pytest.raises(ingest.ConfigError, match=message):
        ingest.ray.read_samples(option(_reader(pb_files)))


def test_importing_ingest_does_not_import_ray():
    done = subprocess.run(
        [sys.executable, "-c", "import sys, ingest; print('ray' in sys.modules)"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


def test_torch_collate_takes_a_sliced_chunked_table_and_columns_a_transform_added():
    table = pa.table(
        {
            "sample_id": pa.array(["a", "bb", "c", "dd"], pa.large_string()),
            "labels": pa.FixedSizeListArray.from_arrays(pa.array([0, 1, 1, 0, 1, 1, 0, 0], pa.float32()), 2),
            "timestamp": pa.array([1, 2, 3, 4], pa.int64()),
            "f.ids": pa.array([[1], [2, 3], [], [4, 5, 6]], pa.large_list(pa.int64())),
            "f.values": pa.array([[1.0], [2.0, 3.0], [], [4.0, 5.0, 6.0]], pa.large_list(pa.float32())),
            "hour": pa.array([7, 8, 9, 10], pa.int32()),  # columns a transform added
            "tags": pa.array([[1], [], [2, 3], [4]], pa.list_(pa.int64())),
        }
    )
    chunked = pa.concat_tables([table.slice(0, 1), table.slice(1, 3)]).slice(1, 3)
    out = ingest.ray.TorchCollate()(chunked)
    assert out["sample_id_bytes"].numpy().tobytes() == b"bbcdd"
    assert out["sample_id_offsets"].tolist() == [0, 2, 3, 5]
    assert out["labels"].tolist() == [[1, 0], [1, 1], [0, 0]]
    assert out["timestamps"].tolist() == [2, 3, 4]
    assert out["f.ids"].tolist() == [2, 3, 4, 5, 6] and out["f.offsets"].tolist() == [0, 2, 2, 5]
    assert np.allclose(out["f.values"].numpy(), [2, 3, 4, 5, 6])
    assert out["hour"].tolist() == [8, 9, 10]
    assert out["tags"].tolist() == [2, 3, 4] and out["tags.offsets"].tolist() == [0, 0, 2, 3]
    assert sorted(out) == sorted(
        ["sample_id_bytes", "sample_id_offsets", "labels", "timestamps", "f.ids", "f.values", "f.offsets"]
        + ["hour", "tags", "tags.offsets"]
    )


def test_a_read_task_joins_its_batches_into_blocks_of_about_block_bytes(monkeypatch, synthetic_file):
    monkeypatch.setattr(ingest.ray, "_BLOCK_BYTES", 1 << 20)
    reader = _reader([synthetic_file], file_type="txt", aux=())
    (task,) = ingest.ray.SampleDatasource(reader).get_read_tasks(1)
    blocks = list(task.read_fn())
    assert len(blocks) >= 3 and all(b.num_rows > 200 for b in blocks[:-1])  # several batches of 200 in each
    assert all(column.num_chunks == 1 for b in blocks for column in b.columns)
    assert sum(b.num_rows for b in blocks) == 3000
    assert sum((_samples_of_rows(b) for b in blocks), collections.Counter()) == _samples_of_reader(reader)


def test_the_shards_of_streaming_split_deliver_every_sample_once_as_ray_train_reads_them(local_ray, pb_files):
    """Ray Train hands each worker one iterator of ``streaming_split``; the workers iterate at the same time."""
    iterators = ingest.ray.read_samples(_reader(pb_files)).streaming_split(2, equal=False)
    got = [collections.Counter(), collections.Counter()]

    def consume(k):
        for batch in iterators[k].iter_torch_batches(batch_size=256, collate_fn=ingest.ray.TorchCollate()):
            sid, at = batch["sample_id_bytes"].numpy().tobytes(), batch["sample_id_offsets"].tolist()
            got[k].update(sid[at[r] : at[r + 1]] for r in range(len(at) - 1))

    workers = [threading.Thread(target=consume, args=(k,)) for k in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert not any(w.is_alive() for w in workers)
    want = collections.Counter(s[0] for s in _samples_of_reader(_reader(pb_files)).elements())
    assert got[0] + got[1] == want
