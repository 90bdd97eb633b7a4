"""DataReader end to end on real sample files: values, errors, batching rules, sharding, threads."""

import gzip
import io
import pickle
import re
import struct
import threading
import zlib
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
import zstandard

import ingest
from ingest import synthetic
from conftest import SAMPLES, as_plain, flatten, key_of, make_reader, read_samples, sample_file, xdl

import naive


# -- golden batches of real files ------------------------------------------------------------------
def test_xdl_sample_gives_golden_batches():
    reader = make_reader([xdl("sample.txt")], label_count=2, batch_size=3)
    reader.feature(name="ufav3", type=ingest.features.sparse)  # serialized=False: (hkey, key) pairs
    reader.feature(name="a", type=ingest.features.dense, nvec=3)
    reader.feature(name="upv14", type=ingest.features.sparse, serialized=True)
    reader.startup()
    first, second = reader.read_all()
    assert first.size == 3 and second.size == 1
    assert first.sample_ids.tolist() == [b"skey1", b"skey2", b"skey1"]
    assert first["ufav3"].ids.tolist() == [[0, 201]] * 3
    np.testing.assert_array_equal(first["ufav3"].values, np.float32([0.1] * 3))
    assert first["ufav3"].offsets.tolist() == [0, 1, 2, 3]
    assert first["upv14"].ids.tolist() == [101, 102, 101] * 3
    np.testing.assert_array_equal(first["upv14"].values, np.float32([0.1, 0.2, 0.3] * 3))
    assert first["upv14"].offsets.tolist() == [0, 3, 6, 9]
    assert first["upv14"].segments.tolist() == [3, 6, 9]
    assert first["upv14"].segments.dtype == np.int32
    np.testing.assert_array_equal(first["a"], np.float32([[0.01, 0.02, 0.03]] * 3))
    np.testing.assert_array_equal(first.labels, np.float32([[1, 0]] * 3))
    assert first.timestamps.tolist() == [150000000, 150000001, 150000000]
    # the short last batch is padded to 3 rows: empty sparse rows, zero dense rows and labels
    assert second.sample_ids.tolist() == [b"skey2"]
    assert second.rows == 3
    assert second["upv14"].offsets.tolist() == [0, 3, 3, 3]
    np.testing.assert_array_equal(second["a"], np.float32([[0.01, 0.02, 0.03], [0, 0, 0], [0, 0, 0]]))
    np.testing.assert_array_equal(second.labels, np.float32([[1, 0], [0, 0], [0, 0]]))
    assert second.timestamps.tolist() == [150000001, 0, 0]
    for batch in (first, second):
        assert batch.validate()


def test_tdm_reads_5000_samples_in_51_groups():
    reader = make_reader([xdl("tdm.dat")], sparse=["train_unit_id", "item_10"], batch_size=1024)
    samples = read_samples(reader)
    stats = reader.stats()
    assert (stats["samples"], stats["groups"], stats["batches"]) == (5000, 51, 5)
    assert samples[0]["sid"] == b"1_0"
    assert samples[0]["sparse"]["train_unit_id"] == [(3827899, 1.0)]
    assert [k for k, _ in samples[0]["sparse"]["item_10"]] == [0] * 13 + [
        2268318,
        2333346,
        2576651,
        3830808,
        4365585,
        4606018,
        230380,
    ]
    assert len(samples[0]["sparse"]["item_10"]) == 20
    assert all(s["labels"] == [1.0] for s in samples)
    assert all(s["ts"] == 0 for s in samples)  # the timestamp field is empty in tdm.dat


@pytest.mark.parametrize(
    "path",
    [
        ("xdl", "sample.txt"),
        ("xdl", "sample2.txt"),
        ("xdl", "tdm.dat"),
        ("xdl", "tdm_serving_sample.dat"),
        SAMPLES / "xdl_example.txt",
        SAMPLES / "edge_cases.txt",
        SAMPLES / "ads.txt",
    ],
)
def test_real_files_read_as_the_twin_reads_them(path):
    path = sample_file(path)
    data = path.read_bytes()
    sparse, dense = set(), {}
    for line in data.split(b"\n"):
        fields = line.rstrip(b"\r").split(b"|")
        if len(fields) >= 5:
            sparse |= {e.split(b"@")[0].decode() for e in fields[2].split(b";") if b"@" in e}
            for e in fields[3].split(b";"):
                if b"@" in e:
                    name, vals = e.split(b"@", 1)
                    dense[name.decode()] = len(vals.split(b","))
    want, errors = naive.parse_text(data, {n: 0 for n in sorted(sparse)}, {n: (w, None) for n, w in dense.items()}, 1)
    assert errors == []
    got = read_samples(make_reader([path], sparse=sorted(sparse), dense=dense, batch_size=7))
    assert got == as_plain(want)


def test_edge_cases_file_values():
    got = read_samples(
        make_reader([SAMPLES / "edge_cases.txt"], sparse=["s", "t"], dense={"d": 2}, batch_size=100, pad=False)
    )
    by_id = {s["sid"]: s for s in got}
    assert [s["sid"] for s in got] == [b"a1", b"a2", b"a3", b"b1", b"b2", b"c1"]  # blank lines skipped
    assert by_id[b"a1"]["sparse"] == {"s": [(1, 1.0), (2, 1.0)], "t": [(3, 0.5)]}  # CRLF line
    assert by_id[b"a2"]["sparse"]["s"] == [(4, 1.0), (5, 1.0)]  # a repeated name concatenates
    assert by_id[b"a3"]["sparse"]["s"] == [(-(2**63), 1.0), (2**63 - 1, 1.0)]
    assert by_id[b"a3"]["ts"] == 0  # five fields: no timestamp
    assert by_id[b"b1"]["sparse"] == {"s": [], "t": []} and by_id[b"b1"]["labels"] == [1.0]
    assert by_id[b"b2"]["sparse"]["t"] == [(7, -0.25), (8, float("inf"))]
    assert by_id[b"c1"]["sparse"]["s"] == [(7, 1.0)] and by_id[b"c1"]["ts"] == 103  # no final newline
    assert by_id[b"b2"]["dense"]["d"] == [9.0, 10.0]


def test_groups_follow_consecutive_group_ids():
    reader = make_reader([SAMPLES / "edge_cases.txt"], sparse=["s"], batch_size=100)
    read_samples(reader)
    # g1 (a1, a2), '' (a3 alone), g2 (b1, b2), g3 (c1)
    assert reader.stats()["groups"] == 4


# -- errors -----------------------------------------------------------------------------------------
def _expected_errors():
    rows = []
    for line in (SAMPLES / "malformed_errors.txt").read_text().splitlines():
        if line.startswith("#"):
            continue
        number, kind, field, column, offset, *text = line.split(" ", 5)
        rows.append((int(number), kind, field, int(column), int(offset), text[0] if text else ""))
    return rows


def _malformed_reader(**options):
    return make_reader([SAMPLES / "malformed.txt"], sparse=["s"], dense={"d": 2}, batch_size=4, **options)


def test_every_malformed_line_is_skipped_with_a_located_error():
    reader = _malformed_reader(on_error="skip")
    with pytest.warns(RuntimeWarning, match="skipped 13 bad lines"):
        got = read_samples(reader)
    assert [s["sid"] for s in got] == [b"ok1", b"ok15"]
    stats = reader.stats()
    assert stats["errors_skipped"] == 13
    expected = _expected_errors()
    assert Counter(stats["errors_by_kind"]) == Counter(kind for _, kind, *_ in expected)
    for message, (number, kind, field, column, offset, text) in zip(stats["first_errors"], expected):
        assert f"malformed.txt:{number}, byte {offset}, column {column}, field {field}" in message
        assert repr(text) in message


@pytest.mark.parametrize("threads", [1, 0])
@pytest.mark.parametrize("number,kind,field,column,offset,text", _expected_errors())
def test_malformed_line_raises_its_error_after_the_samples_before_it(
    tmp_path, number, kind, field, column, offset, text, threads
):
    lines = (SAMPLES / "malformed.txt").read_bytes().split(b"\n")
    path = tmp_path / "one_bad.txt"
    path.write_bytes(b"\n".join([lines[0]] + [lines[number - 1]] + [lines[14]]) + b"\n")
    reader = make_reader([path], sparse=["s"], dense={"d": 2}, batch_size=4, threads=threads)
    reader.startup()
    batch = next(reader)
    assert batch.sample_ids.tolist() == [b"ok1"]  # what came before the bad line is delivered
    with pytest.raises(ingest.TextParseError) as info:
        next(reader)
    err = info.value
    assert (err.line, err.kind, err.field, err.column, err.text) == (2, kind, field, column, text)
    assert err.offset == len(lines[0]) + 1 + (offset - sum(len(x) + 1 for x in lines[: number - 1]))
    assert err.source.endswith("one_bad.txt")
    assert "^" in err.render()
    assert isinstance(err, ingest.IngestError)
    with pytest.raises(StopIteration):
        next(reader)


def test_missing_path_is_a_source_error(tmp_path):
    reader = make_reader([tmp_path / "nope.txt"], sparse=["s"])
    with pytest.raises(ingest.SourceError, match="nope.txt"):
        reader.startup()


@pytest.mark.parametrize(
    "call, named",
    [
        (lambda r: r.batch_size(0), "batch_size=0"),
        (lambda r: r.threads(-1), "threads=-1"),
        (lambda r: r.on_error("ignore"), "on_error='ignore'"),
        (lambda r: r.shard(3, 3), "task_index=3"),
        (lambda r: r.feature(name="x", type="dense"), "dense feature 'x': nvec=None"),
        (lambda r: r.feature(name="x", type="dense", nvec=3, mask="10"), "dense feature 'x': mask='10'"),
        (lambda r: r.feature(name="x", type="sparse", mask="1"), "sparse feature 'x': mask"),
        (lambda r: r.feature(name="a|b", type="sparse"), "feature name='a|b'"),
        (lambda r: r.feature(name="x", type="embedding"), "feature 'x': type='embedding'"),
        (lambda r: r.z("brotli"), "compression='brotli'"),
        # flags take True or False only: bool('False') is True
        (lambda r: r.split_group("False"), "split_group='False': expected True or False"),
        (lambda r: r.unique_ids([0]), "unique_ids=[0]: expected True or False"),
        (lambda r: r.pad(2), "pad=2: expected True or False"),
        (lambda r: r.shuffle(-1), "shuffle seed=-1: expected an int >= 0"),
        (lambda r: r.feature(name="x", type="sparse", serialized="no"), "feature 'x': serialized='no'"),
        (lambda r: r.feature(name="x", type="sparse", table=True), "feature 'x': table=True"),
        # counts a reader allocates or starts by are bounded: a typo is an error, not a hang or a MemoryError
        (lambda r: r.threads(10**12), "threads=1000000000000: expected an int >= 0 and <= 1,024"),
        (lambda r: r.prefetch(10**12), "prefetch=1000000000000: expected an int >= 1 and <= 65,536"),
        (lambda r: r.batch_size(2**24 + 1), "batch_size=16777217: expected an int >= 1 and <= 16,777,216"),
        (lambda r: r.max_group_size(2**63), "max_group_size=9223372036854775808"),
        (lambda r: r.feature(name="x", type="sparse", table=10**6), "feature 'x': table=1000000"),
        (lambda r: r.feature(name="x", type="dense", nvec=2**63), "dense feature 'x': nvec=9223372036854775808"),
    ],
)
def test_bad_options_are_config_errors_that_name_the_argument(call, named):
    reader = ingest.DataReader("r", paths=["x"])
    with pytest.raises(ingest.ConfigError) as info:
        call(reader)
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(named)


def test_numpy_integers_and_bools_are_taken_as_ints_and_bools(synthetic_file):
    reader = make_reader([synthetic_file], sparse=["cate"], batch_size=(np.int64(512),), threads=(np.int32(2),))
    reader.shard(np.int64(0), np.int64(2)).pad(np.bool_(False)).feature("user_emb", "dense", nvec=np.int64(8))
    reader.split_group(1).drop_last(0).shuffle(np.int64(7))  # the ints 1 and 0 are flags too
    sizes = [b.size for b in reader.startup()]
    assert max(sizes) == 512 and 0 < sum(sizes) < 3000  # a batch of 512, half the units (shard 0 of 2)


# -- batching rules -----------------------------------------------------------------------------------
def _grouped_file(tmp_path, sizes):
    lines = []
    for g, size in enumerate(sizes):
        lines += [f"s{g}_{i}|g{g}|f@{g}|x@1|1|{g}" for i in range(size)]
    path = tmp_path / "groups.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_feature_in_one_sample_of_many_blocks_counts_as_seen_in_every_epoch(tmp_path):
    # many units, two parse workers: every epoch must find the one sample that holds "rare" (sparse) and "spot"
    # (dense), however the workers' blocks interleave, and only "absent" is reported, once an epoch
    lines = [f"s{i}|g{i}|f@{i}|x@1|1|{i}" for i in range(3000)]
    lines[2345] = "s2345|g2345|f@1;rare@7|x@1;spot@2.5|1|2345"
    path = tmp_path / "rare.txt"
    path.write_text("\n".join(lines) + "\n")
    reader = make_reader(
        [path], sparse=["f", "rare", "absent"], dense={"x": 1, "spot": 1}, unit_bytes=2_000, threads=2, epochs=3
    )
    with pytest.warns(ingest.UnseenFeatureWarning) as caught:
        assert sum(b.size for b in reader.startup()) == 9000
    assert [str(w.message).split(" was ")[0] for w in caught] == ["reader 'test': feature 'absent'"] * 3
    assert reader.stats()["features_never_seen"] == ["absent"]


def test_split_group_true_cuts_groups_at_the_batch_boundary(tmp_path):
    reader = make_reader([_grouped_file(tmp_path, [3, 3, 3])], sparse=["f"], batch_size=4, pad=False)
    reader.startup()
    assert [b.size for b in reader] == [4, 4, 1]


def test_split_group_false_moves_whole_group(tmp_path):
    reader = make_reader(
        [_grouped_file(tmp_path, [3, 3, 2, 4])], sparse=["f"], batch_size=4, split_group=False, pad=False
    )
    reader.startup()
    batches = reader.read_all()
    assert [b.size for b in batches] == [3, 3, 2, 4]
    assert [b.sample_ids.tolist()[0] for b in batches] == [b"s0_0", b"s1_0", b"s2_0", b"s3_0"]


def test_split_group_false_group_larger_than_batch_raises_or_skips(tmp_path):
    path = _grouped_file(tmp_path, [2, 5, 2])
    reader = make_reader([path], sparse=["f"], batch_size=4, split_group=False)
    reader.startup()
    assert next(reader).size == 2
    with pytest.raises(ingest.GroupTooLargeError, match="5 samples is larger than batch_size=4"):
        next(reader)
    reader = make_reader([path], sparse=["f"], batch_size=4, split_group=False, on_error="skip", pad=False)
    with pytest.warns(RuntimeWarning):
        got = read_samples(reader)
    assert [s["sid"] for s in got] == [b"s0_0", b"s0_1", b"s2_0", b"s2_1"]
    assert reader.stats()["errors_by_kind"] == {"GroupTooLargeError": 1}


def test_drop_last_drops_the_short_batch_and_pad_off_keeps_it_short(tmp_path):
    path = _grouped_file(tmp_path, [5])
    reader = make_reader([path], sparse=["f"], batch_size=2, drop_last=True)
    reader.startup()
    assert [b.size for b in reader] == [2, 2]
    reader = make_reader([path], sparse=["f"], batch_size=2, pad=False)
    reader.startup()
    batches = reader.read_all()
    assert [(b.size, b.rows) for b in batches] == [(2, 2), (2, 2), (1, 1)]


def test_cutoff_keeps_first_or_last_values_and_mask_selects_dense_columns(tmp_path):
    path = tmp_path / "cut.txt"
    path.write_text("a|g|f@1,2,3,4;h@5,6,7|v@1,2,3,4|1|\n")
    reader = ingest.DataReader("r", paths=[str(path)])
    reader.feature(name="f", type="sparse", serialized=True, cutoff=2)
    reader.feature(name="h", type="sparse", serialized=True, cutoff=-2)
    reader.feature(name="v", type="dense", nvec=4, mask="1010")
    reader.startup()
    (batch,) = reader.read_all()
    assert batch["f"].ids.tolist() == [1, 2]
    assert batch["h"].ids.tolist() == [6, 7]
    assert batch["v"][0].tolist() == [1.0, 3.0]
    assert batch["v"].shape == (1024, 2)


def test_epochs_repeat_the_input(tmp_path):
    path = _grouped_file(tmp_path, [2, 1])
    got = read_samples(make_reader([path], sparse=["f"], epochs=3, batch_size=4))
    assert [s["sid"] for s in got] == [b"s0_0", b"s0_1", b"s1_0"] * 3


# -- parallelism, sharding, byte ranges ------------------------------------------------------------------
def _all_features(reader):
    from ingest import synthetic

    return synthetic.declare(reader, serialized=True)


def _synthetic_samples(path, **options):
    reader = _all_features(ingest.DataReader("s", paths=[str(path)]))
    for method, arg in options.items():
        getattr(reader, method)(*arg) if isinstance(arg, tuple) else getattr(reader, method)(arg)
    return read_samples(reader)


def test_byte_ranges_read_exactly_what_the_whole_file_reads(synthetic_file):
    whole = _synthetic_samples(synthetic_file)
    ranged = _synthetic_samples(synthetic_file, unit_bytes=50_000, deterministic=True, threads=2)
    assert ranged == whole
    assert len(whole) == 3000


def test_byte_ranges_never_cut_a_group(synthetic_file):
    reader = _all_features(ingest.DataReader("s", paths=[str(synthetic_file)])).unit_bytes(50_000)
    read_samples(reader)
    whole = _all_features(ingest.DataReader("s", paths=[str(synthetic_file)]))
    read_samples(whole)
    assert reader.stats()["units"] > 50
    assert reader.stats()["groups"] == whole.stats()["groups"]


def test_shards_cover_the_input_exactly_once(synthetic_file, tmp_path):
    other = tmp_path / "small.txt"
    other.write_bytes((SAMPLES / "xdl_example.txt").read_bytes())
    whole = _synthetic_samples(synthetic_file)
    parts = [_synthetic_samples(synthetic_file, unit_bytes=100_000, shard=(i, 3)) for i in range(3)]
    assert all(parts)
    assert Counter(key_of(s) for p in parts for s in p) == Counter(key_of(s) for s in whole)


def test_two_threads_give_the_same_samples_as_one(synthetic_file):
    one = _synthetic_samples(synthetic_file, unit_bytes=200_000)
    two = _synthetic_samples(synthetic_file, unit_bytes=200_000, threads=2)
    assert Counter(key_of(s) for s in two) == Counter(key_of(s) for s in one)
    ordered = _synthetic_samples(synthetic_file, unit_bytes=200_000, threads=2, deterministic=True)
    assert ordered == one


@pytest.mark.parametrize("fmt", ["txt", "pb"])
def test_threads_0_reads_in_the_consumers_thread_what_one_thread_reads_in_order(synthetic_file, tmp_path, fmt):
    """threads(0) starts no thread: each next() parses until a batch is complete, giving the batches of a
    deterministic threads(1) read, arrays, unique ids and sample ids alike."""
    path = synthetic_file
    if fmt == "pb":
        path = tmp_path / "s.pb"
        ingest.convert(str(synthetic_file), str(path))

    def batches(threads):
        reader = _all_features(ingest.DataReader("s", paths=[str(path)], file_type=fmt)).unit_bytes(100_000)
        reader.threads(threads).deterministic(True).unique_ids(True).batch_size(300).startup()
        with reader:
            running = threading.active_count()
            got = [(b.arrays(), b.sample_ids.tolist()) for b in reader]
        return got, running, reader.stats()

    before = threading.active_count()
    (got, running, stats), (want, _, _) = batches(0), batches(1)
    assert running == before
    assert stats["samples"] == 3000 and stats["units"] > 1
    assert len(got) == len(want)
    for (arrays, sids), (want_arrays, want_sids) in zip(got, want):
        assert sids == want_sids
        assert arrays.keys() == want_arrays.keys()
        assert all(np.array_equal(arrays[k], want_arrays[k]) for k in arrays)


def test_a_batch_pickles_with_its_features(synthetic_file):
    reader = _all_features(ingest.DataReader("s", paths=[str(synthetic_file)])).unique_ids(True).batch_size(100)
    with reader.startup():
        batch = next(reader)
        copy = pickle.loads(pickle.dumps(batch))
    arrays, want = copy.arrays(), batch.arrays()
    assert arrays.keys() == want.keys() and "item.unique_ids" in arrays
    assert all(np.array_equal(arrays[k], want[k]) for k in arrays)
    assert copy.sample_ids.tolist() == batch.sample_ids.tolist() and len(copy) == 100


def test_a_batch_makes_its_arrays_when_its_consumer_first_asks(synthetic_file):
    """The thread that builds a batch makes no array of it (the kernels view them in its one buffer); the first
    array asked for makes them all, views of that buffer, and a released batch keeps none."""
    reader = _all_features(ingest.DataReader("s", paths=[str(synthetic_file)])).unique_ids(True).batch_size(100)
    with reader.startup():
        batch = next(reader)
        laid = batch._laid
        assert laid._arrays is None and batch.rows == 100
        labels = batch.labels
        assert laid._arrays is not None and labels.base is laid.buf
        assert all(a.base is laid.buf for a in batch.arrays().values())
        batch.validate()
        batch.release()
        assert batch.labels is None and batch.indicators == [] and batch.rows == 100


@pytest.mark.parametrize(
    "option,what",
    [
        (lambda r: r.add_op(lambda group: True).keep_sample(True), "keep_sample / pause"),
        (lambda r: r.pause(100), "keep_sample / pause"),
    ],
)
def test_threads_0_refuses_what_needs_parse_threads(synthetic_file, option, what):
    reader = option(_all_features(ingest.DataReader("s", paths=[str(synthetic_file)])).threads(0))
    with pytest.raises(ingest.ConfigError, match=rf"threads\(0\).*{what}.*threads\(1\)"):
        reader.startup()


def _batches_of_three_workers(path, **options):
    reader = _all_features(ingest.DataReader("s", paths=[str(path)])).threads(3).unit_bytes(100_000)
    for method, arg in options.items():
        getattr(reader, method)(arg)
    reader.startup()
    with reader:
        return [(b.size, b.rows, [s["sid"] for s in flatten(b)]) for b in reader]


def test_workers_that_batch_on_their_own_leave_one_short_batch(synthetic_file):
    """Each parse worker cuts its own batches; the last one to stop cuts what all of them left unfinished, so
    every batch but the last is full, as with one thread, and every sample comes once."""
    sids = Counter(s["sid"] for s in _synthetic_samples(synthetic_file))
    batches = _batches_of_three_workers(synthetic_file, batch_size=128, pad=False)
    assert [size for size, _, _ in batches] == [128] * 23 + [3000 - 23 * 128]
    assert Counter(sid for _, _, got in batches for sid in got) == sids
    padded = _batches_of_three_workers(synthetic_file, batch_size=128)
    assert [(size, rows) for size, rows, _ in padded[-2:]] == [(128, 128), (3000 - 23 * 128, 128)]
    dropped = _batches_of_three_workers(synthetic_file, batch_size=128, drop_last=True)
    assert [size for size, _, _ in dropped] == [128] * 23
    assert len(set(sid for _, _, got in dropped for sid in got)) == 23 * 128


def test_workers_that_batch_on_their_own_keep_groups_whole(synthetic_file):
    groups = {}
    for s in _synthetic_samples(synthetic_file):
        groups.setdefault(s["sid"].split(b"_")[0], set()).add(s["sid"])
    batches = _batches_of_three_workers(synthetic_file, batch_size=64, split_group=False, pad=False)
    assert sum(size for size, _, _ in batches) == 3000
    for _, _, got in batches:  # a group's samples all in one batch
        for g in {sid.split(b"_")[0] for sid in got}:
            assert groups[g] <= set(got)


def test_a_parse_worker_hands_its_batches_over_before_it_reads_the_next_block(synthetic_file, monkeypatch):
    """A parse worker holds the batches it cuts from a block until it goes on to read the next one (the consumer,
    woken then, runs while the worker's read and parse hold no GIL): at each read, every full batch of the samples
    parsed so far has been handed over, and the batches come out as they were cut."""
    from ingest.queues import Handover

    reader = _all_features(ingest.DataReader("s", paths=[str(synthetic_file)]))
    seen = []  # per read: (samples parsed so far, samples in the batches handed over so far)
    handed = [0]
    release = Handover.release

    def recording(self):
        handed[0] += sum(b.size for b in self._held)
        seen.append((reader.stats()["samples"], handed[0]))
        return release(self)

    monkeypatch.setattr(Handover, "release", recording)
    reader.threads(1).unit_bytes(100_000).batch_size(32).pad(False).startup()
    with reader:
        sizes = [b.size for b in reader]
    assert sizes == [32] * (3000 // 32) + [3000 % 32]
    assert len(seen) > 30  # one a block: ~40 units of one block each, at most 3 batches a block (a worker holds 4)
    assert all(out == parsed // 32 * 32 for parsed, out in seen)


def test_group_alignment_matches_a_line_by_line_scan(synthetic_file):
    from ingest.formats.text import group_start_at_or_after

    data = synthetic_file.read_bytes()
    starts, prev, pos = [], None, 0
    for line in data.split(b"\n")[:-1]:
        gid = line.split(b"|")[1]
        if gid != prev:
            starts.append(pos)
        prev, pos = gid, pos + len(line) + 1
    starts.append(len(data))
    rng = np.random.default_rng(0)
    with open(synthetic_file, "rb") as f:
        for offset in [0, 1, len(data) - 1, len(data)] + rng.integers(0, len(data), 40).tolist():
            want = next(s for s in starts if s >= offset)
            assert group_start_at_or_after(f, offset, len(data)) == want


def _group_starts(data):
    """Line-by-line twin of group_start_at_or_after: offsets of the lines that start a group, then len(data); 0 is
    always a start (a range at the file's start begins there)."""
    starts, prev, pos = [0], None, 0
    for line in data.split(b"\n")[:-1]:
        if line.rstrip(b"\r"):
            parts = line.rstrip(b"\r").split(b"|", 2)
            gid = parts[1] if len(parts) == 3 else None
            if (prev is None or not gid or not prev or gid != prev) and pos:
                starts.append(pos)
            prev = gid if gid is not None else b""
        pos += len(line) + 1
    return starts + [len(data)]


_lines = st.lists(
    st.one_of(
        st.just(b""),
        st.tuples(st.sampled_from([b"g1", b"g2", b""]), st.integers(0, 3000)).map(
            lambda t: b"s|" + t[0] + b"|f@" + b"1," * t[1] + b"2|1"
        ),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(_lines, st.lists(st.integers(0, 1 << 16), min_size=1, max_size=8), st.integers(1, 4096))
def test_range_alignment_matches_a_line_by_line_scan(tmp_path_factory, lines, offsets, length):
    from types import SimpleNamespace
    from ingest.formats.text import group_start_at_or_after, range_span

    data = b"\n".join(lines) + b"\n"
    size, starts = len(data), _group_starts(data)
    path = tmp_path_factory.mktemp("align") / "a.txt"
    path.write_bytes(data)

    def want(offset):
        return next(s for s in starts if s >= offset)

    with open(path, "rb") as f:
        for offset in [o % (size + 1) for o in offsets]:
            before = offset + length
            assert group_start_at_or_after(f, offset, size) == want(offset)
            got = group_start_at_or_after(f, offset, size, before=before)
            assert got == want(offset) if want(offset) < before else got >= before
            end = min(before, size)
            span = range_span(f, SimpleNamespace(start=offset, end=end, size=size))
            exact = (want(offset), want(end))
            assert span == exact if exact[0] < exact[1] else span[0] >= span[1]


def test_aligning_ranges_inside_a_long_line_reads_each_range_about_once(tmp_path):
    from types import SimpleNamespace
    from ingest.formats.text import range_span

    # one 4 MB line among short ones, cut into 4 KiB ranges: each range in the line used to scan to its end
    data = b"a|g1|f@1|1\n" + b"b|g2|f@" + b"1," * (2 << 20) + b"2|1\n" + b"c|g3|f@3|1\n"
    path = tmp_path / "long.txt"
    path.write_bytes(data)

    class Counting(io.BufferedReader):
        bytes_read = 0

        def read(self, n=-1):
            out = super().read(n)
            Counting.bytes_read += len(out)
            return out

    size, step = len(data), 4096
    spans = []
    with Counting(io.FileIO(path)) as f:
        for lo in range(0, size, step):
            spans.append(range_span(f, SimpleNamespace(start=lo, end=min(lo + step, size), size=size)))
    assert [s for s in spans if s[0] < s[1]] == [(0, size - 11), (size - 11, size)]
    assert Counting.bytes_read < 10 * size  # a few passes (two look-backs over the long line), not one a range


# -- sources -----------------------------------------------------------------------------------------------
def test_compressed_files_read_like_the_plain_file(tmp_path):
    plain = (SAMPLES / "edge_cases.txt").read_bytes()
    (tmp_path / "e.txt.gz").write_bytes(gzip.compress(plain))
    (tmp_path / "e.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(plain))
    (tmp_path / "e.txt.zlib").write_bytes(zlib.compress(plain[:100]) + zlib.compress(plain[100:]))
    (tmp_path / "forced.bin").write_bytes(gzip.compress(plain))
    want = read_samples(make_reader([SAMPLES / "edge_cases.txt"], sparse=["s", "t"]))
    for name in ("e.txt.gz", "e.txt.zst", "e.txt.zlib"):
        assert read_samples(make_reader([tmp_path / name], sparse=["s", "t"])) == want
    assert read_samples(make_reader([tmp_path / "forced.bin"], sparse=["s", "t"], z="gzip")) == want


def test_a_zstd_file_of_several_frames_is_read_whole(tmp_path):
    """Files compressed in parts (pzstd, or .zst files concatenated) hold several frames, and pzstd's skippable
    frames between them: every frame is read."""
    data = (SAMPLES / "edge_cases.txt").read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    skippable = struct.pack("<II", 0x184D2A50, 4) + b"\x01\x02\x03\x04"
    frames = [skippable, zstandard.compress(data[:cut]), skippable, zstandard.compress(data[cut:])]
    (tmp_path / "e.txt.zst").write_bytes(b"".join(frames))
    want = read_samples(make_reader([SAMPLES / "edge_cases.txt"], sparse=["s", "t"]))
    assert read_samples(make_reader([tmp_path / "e.txt.zst"], sparse=["s", "t"])) == want


def test_xdl_zlib_stream_decompresses():
    from ingest.sources.compression import decompressed

    with decompressed(open(xdl("zlib_test_data"), "rb"), "zlib") as f:
        assert f.read() == b"abcdefghijklmnopqrstuvwxyz1234567890" * 10


@pytest.mark.parametrize("codec", ["zlib", "zstd"])
def test_concatenated_streams_read_to_the_end_in_one_read(codec):
    from ingest.sources.compression import decompressed

    text = b"".join(synthetic.generate(3000, seed=4))  # several of the reader's input steps a stream
    compress = {"zlib": zlib.compress, "zstd": zstandard.compress}[codec]
    with decompressed(io.BytesIO(compress(text[:1000]) + compress(text[1000:])), codec) as f:
        assert f.read() == text


def test_directories_and_globs_expand_sorted(tmp_path):
    for name in ("b.txt", "a.txt", "_SUCCESS", ".hidden"):
        (tmp_path / name).write_text(f"{name}|g|f@1|x@1|1|1\n")
    got = read_samples(make_reader([tmp_path], sparse=["f"]))
    assert [s["sid"] for s in got] == [b"a.txt", b"b.txt"]
    got = read_samples(make_reader([tmp_path / "*.txt", tmp_path / "a.txt"], sparse=["f"]))
    assert [s["sid"] for s in got] == [b"a.txt", b"b.txt", b"a.txt"]


# -- lifecycle and batch API ---------------------------------------------------------------------------------
def test_shutdown_after_one_batch_stops_every_thread(synthetic_file):
    reader = _all_features(ingest.DataReader("s", paths=[str(synthetic_file)])).threads(2).batch_size(16)
    reader.epochs(0).unit_bytes(100_000).prefetch(1).startup()
    next(reader)
    reader.shutdown()
    assert not [t for t in threading.enumerate() if t.name.startswith("ingest-")]
    with pytest.raises(ingest.ReaderClosedError):
        for _ in range(1000):
            next(reader)


def test_options_are_fixed_after_startup():
    reader = make_reader([SAMPLES / "edge_cases.txt"], sparse=["s"])
    reader.startup()
    with pytest.raises(ingest.ConfigError, match="fixed once startup"):
        reader.batch_size(3)
    reader.shutdown()


def test_batch_arrays_are_contiguous_and_shared_through_dlpack():
    reader = make_reader([SAMPLES / "xdl_example.txt"], sparse=["clk_14"], dense={"qscore": 2}, label_count=2)
    reader.startup()
    (batch,) = reader.read_all()
    arrays = batch.arrays()
    assert set(arrays) == {"labels", "timestamps", "clk_14.ids", "clk_14.values", "clk_14.offsets", "qscore"}
    for name, exported in batch.to_dlpack().items():
        view = np.from_dlpack(exported)
        assert np.shares_memory(view, arrays[name])
        assert arrays[name].flags.c_contiguous


def test_validate_catches_a_broken_batch():
    reader = make_reader([SAMPLES / "xdl_example.txt"], sparse=["clk_14"], label_count=2)
    reader.startup()
    (batch,) = reader.read_all()
    batch["clk_14"].offsets[2] = 100
    with pytest.raises(ingest.InvalidBatchError, match="clk_14"):
        batch.validate()


@settings(max_examples=25, deadline=None)
@given(samples=st.integers(1, 400), seed=st.integers(0, 2**32 - 1))
def test_synthetic_generator_matches_python_formatting(samples, seed):
    """``format_ads_lines`` (the kernel behind ``synthetic.generate``) against f-strings of the same arrays."""

    def fmt4(v):
        sign = "-" if v < 0 else ""
        return f"{sign}{abs(v) // 10000}.{abs(v) % 10000:04d}"

    lines = []
    for first_group, a in synthetic.generate_arrays(samples, seed=seed):
        for i in range(len(a["group"])):
            g = a["group"][i]
            gid = first_group + g
            sparse = [
                f"uid@{a['uid'][g]}",
                f"age@{a['age'][g]}",
                f"gender@{a['gender'][g]}",
                "clk_hist@" + ",".join(f"{k}:{c}" for k, c in zip(a["clk_keys"][g], a["clk_cnt"][g])),
                "cate_pref@" + ",".join(f"{k}:{fmt4(w)}" for k, w in zip(a["pref_keys"][g], a["pref_w"][g])),
                f"item@{a['item'][i]}",
                f"cate@{a['cate'][i]}",
                f"shop@{a['shop'][i]}",
                f"brand@{a['brand'][i]}",
                "title@" + ",".join(map(str, a["title"][i])),
                "tags@" + ",".join(f"{k}:{fmt4(w)}" for k, w in zip(a["tags"][i], a["tag_w"][i])),
            ]
            dense = [
                "user_emb@" + ",".join(map(fmt4, a["user_emb"][g])),
                "ad_ctx@" + ",".join(map(fmt4, a["ad_ctx"][i])),
            ]
            lines.append(
                f"pv{gid}_{a['pos_in_group'][i]}|pv{gid}|{';'.join(sparse)}|{';'.join(dense)}|"
                f"{a['clk'][i]}.0,{a['conv'][i]}.0|{a['ts'][i]}\n"
            )
    assert b"".join(synthetic.generate(samples, seed=seed)) == "".join(lines).encode()
    sizes = Counter(line.split("|")[1] for line in lines)
    assert max(sizes.values()) <= 40


@pytest.mark.parametrize("suffix", [".zst", ".gz", ".lz4"])
def test_corrupt_compressed_file_is_a_source_error_naming_it(tmp_path, suffix):
    """Compressed units are decompressed on a read-ahead thread; its errors reach the reader located."""
    good = zstandard.ZstdCompressor().compress(b"a|g|x@1||1\n" * 1000)
    path = tmp_path / ("bad.txt" + suffix)
    path.write_bytes(good[: len(good) // 2] + b"\x00garbage" * 50)
    reader = make_reader([path], sparse=["x"])
    with pytest.raises(ingest.SourceError) as err:
        read_samples(reader)
    assert str(path) in str(err.value)


def _compressed(suffix, data):
    """``data`` as one stream of the codec of ``suffix``, written as ``ingest convert`` writes it (zlib, which
    ingest only reads, by zlib)."""
    from ingest.sources.compression import compressed_writer, infer_compression

    codec = infer_compression(suffix)
    if codec == "zlib":
        return zlib.compress(data)
    out = io.BytesIO()
    writer = compressed_writer(out, codec)
    writer.write(data)
    writer.close()
    return out.getvalue()


@pytest.mark.parametrize("suffix", [".zst", ".zlib", ".gz", ".lz4"])
@pytest.mark.parametrize("damage", ["cut in a stream's header", "cut at a block's end", "bytes after its end"])
def test_a_compressed_file_cut_short_or_with_bytes_after_its_end_is_a_source_error(tmp_path, suffix, damage):
    """A file of two streams (frames), the first ending with a whole sample group.  zstandard's stream reader
    and zlib's decompressobj end a truncated stream silently, as if the file ended there, where the groups
    before parse as a whole file would: every codec's reader checks that the file ends where a stream does."""
    lines = b"".join(synthetic.generate(3000, seed=5)).splitlines(keepends=True)
    first, second = _compressed(suffix, b"".join(lines[:1000])), _compressed(suffix, b"".join(lines[1000:]))
    damaged = {
        "cut in a stream's header": first + second[:10],
        "cut at a block's end": first + second[:-4],
        "bytes after its end": first + second + b"\x00garbage",
    }
    path = tmp_path / f"cut.txt{suffix}"
    path.write_bytes(damaged[damage])
    with pytest.raises(ingest.SourceError) as err:
        read_samples(make_reader([path], sparse=["item"]))
    assert str(path) in str(err.value)


def test_a_corrupt_compressed_file_names_the_decompressed_bytes_it_failed_in(tmp_path):
    from ingest.sources.compression import decompressed

    text = b"".join(synthetic.generate(8000, seed=4))  # about 10 MB: a read-ahead chunk after the first fails
    packed = zstandard.ZstdCompressor(level=1, write_checksum=True).compress(text)
    at = len(packed) * 3 // 4
    path = tmp_path / "bad.txt.zst"
    path.write_bytes(packed[:at] + b"\x00garbage" * 50)
    good = 0  # what decompresses before the damage
    with decompressed(open(path, "rb"), "zstd") as f, pytest.raises(zstandard.ZstdError):
        while chunk := f.read(1 << 16):
            good += len(chunk)
    with pytest.raises(ingest.SourceError, match=r"cannot read bytes (\d+)-(\d+) of the stream") as err:
        read_samples(make_reader([path], sparse=["item"]))
    first, end = map(int, re.search(r"bytes (\d+)-(\d+)", str(err.value)).groups())
    assert str(path) in str(err.value) and 0 < first <= good < end


def test_discovery_refuses_binary_input(tmp_path):
    """--features auto over a pb file read as text stops at the first name with control bytes (no endless
    scan of binary 'names')."""
    from ingest.discover import scan_features
    from ingest.formats import FileType
    from ingest.sources.plan import plan_paths
    from ingest import synthetic

    src = tmp_path / "a.txt"
    synthetic.write(src, 3000, seed=2)
    ingest.convert([str(src)], str(tmp_path / "a.pb"), log=lambda *_: None)
    with pytest.raises(ingest.DataError, match="control bytes") as info:
        scan_features(plan_paths([str(tmp_path / "a.pb")], splittable=False), FileType.txt, 1)
    assert info.value.source.endswith("a.pb")
    at = info.value.offset  # where the bad name is in the file
    assert (tmp_path / "a.pb").read_bytes()[at : at + 40].decode("utf-8", "replace").startswith(info.value.text[:2])


def test_a_reader_pickles_its_options_before_startup_and_reads_the_same_after(synthetic_file):
    import pickle

    reader = _all_features(ingest.DataReader("p", paths=[str(synthetic_file)])).batch_size(100).threads(2)
    reader.shard(1, 2).unit_bytes(100_000).unique_ids(True).kafka(start="latest")
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.name == "p" and copy._options == reader._options
    assert sorted(map(key_of, read_samples(copy))) == sorted(map(key_of, read_samples(reader)))
    with pytest.raises(ingest.ConfigError, match="a started reader cannot be pickled"):
        pickle.dumps(reader)
