"""ingest convert and ingest inspect: round trips, structured compression, errors."""

import json
import struct

import numpy as np
import pytest

import ingest
from ingest import sample_pb2 as pb
from ingest.cli import main as cli
from ingest.convert import choose_aux, convert
from ingest.discover import scan_text_features
from ingest.sources.plan import plan_paths

from conftest import SAMPLES, key_of, make_reader, read_samples, sample_file, xdl
from pbwire import frame, length_delimited, tag, unframe

quiet = {"log": lambda *_: None}


def _all_samples(path, file_type="txt"):
    """Every sample of a file with every feature it has declared (aux tables resolved), in order."""
    info = ingest.inspect(str(path), n=0)
    reader = ingest.DataReader("all", [str(path)], file_type=file_type).label_count(info["label_count"])
    for table, feats in enumerate(info["tables"]):
        for f in feats:
            reader.feature(f["name"], f["type"], table=table, nvec=f.get("nvec"), serialized=True)
    return read_samples(reader)


@pytest.mark.parametrize(
    "source", [SAMPLES / "ads.txt", ("xdl", "tdm.dat"), ("xdl", "sample.txt"), ("xdl", "sample2.txt")]
)
@pytest.mark.parametrize("via", ["pb", "spb"])
def test_text_round_trip_reproduces_every_sample(tmp_path, source, via):
    source = sample_file(source)
    mid = tmp_path / f"mid.{via}"
    back = tmp_path / "back.txt"
    convert([str(source)], str(mid), aux="auto" if via == "pb" else None, threads=2, **quiet)
    convert([str(mid)], str(back), threads=2, **quiet)
    want, got = _all_samples(source), _all_samples(back)
    if via == "spb":  # SampleSimple has no timestamp field
        for s in want:
            s["ts"] = 0
    assert got == want


def test_pb_groups_match_text_groups(tmp_path):
    """Groups survive text -> pb -> text: the group structure seen by the reader is the same."""
    src = xdl("tdm.dat")
    convert([str(src)], str(tmp_path / "t.pb"), aux="auto", **quiet)
    convert([str(tmp_path / "t.pb")], str(tmp_path / "t.txt"), **quiet)
    counts = [ingest.inspect(str(p), n=0)["groups"] for p in (src, tmp_path / "t.pb", tmp_path / "t.txt")]
    assert counts == [51, 51, 51]


def test_aux_auto_picks_the_user_features(tmp_path):
    src = SAMPLES / "ads.txt"
    features = scan_text_features(plan_paths([str(src)], splittable=False))
    assert choose_aux(str(src), features) == ["uid", "age", "gender", "clk_hist", "cate_pref", "user_emb"]


def test_structured_compression_stores_aux_lines_once_per_distinct_content(tmp_path):
    lines = [
        "a|g|item@1;user@7|d@1,2|1",
        "b|g|item@2;user@7|d@1,2|0",
        "c|g|item@3;user@8|d@1,2|1",
        "d|h|item@4;user@9|d@3,4|1",
    ]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.pb"
    summary = convert([str(src)], str(out), aux=["user", "d"], **quiet)
    assert summary["aux"] == ["user", "d"]
    groups = [pb.SampleGroup.FromString(record) for record in unframe(out.read_bytes())]
    assert len(groups) == 2
    g = groups[0]
    assert [line.refer for line in g.feature_tables[0].feature_lines] == [0, 0, 1]
    aux = [[(f.name, [v.key for v in f.values]) for f in line.features] for line in g.feature_tables[1].feature_lines]
    assert aux == [[("user", [7]), ("d", [0])], [("user", [8]), ("d", [0])]]
    assert list(g.feature_tables[1].feature_lines[0].features[1].values[0].vector) == [1.0, 2.0]
    assert list(g.sample_ids) == ["a", "b", "c"]
    reader = ingest.DataReader("r", [str(out)], file_type="pb").batch_size(8).label_count(1)
    reader.feature("item", "sparse").feature("user", "sparse", table=1, serialized=True)
    reader.feature("d", "dense", nvec=2, table=1)
    [batch] = reader.startup().read_all()
    assert batch["user"].ids.tolist() == [7, 8, 9]
    assert batch.indicators[0].tolist()[:4] == [0, 0, 1, 2]
    np.testing.assert_array_equal(batch["d"][:3], [[1, 2], [1, 2], [3, 4]])


def test_pb_is_smaller_and_directory_output_has_one_file_per_input_and_a_manifest(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    inputs = [str(SAMPLES / "xdl_example.txt"), str(SAMPLES / "ads.txt")]  # not in name order
    summary = convert(inputs, str(out) + "/", dst="pb", aux="auto", **quiet)
    assert sorted(p.name for p in out.iterdir()) == ["_manifest.json", "ads.pb", "xdl_example.pb"]
    assert (out / "ads.pb").stat().st_size < (SAMPLES / "ads.txt").stat().st_size
    assert summary["outputs"] == [str(out / "xdl_example.pb"), str(out / "ads.pb")]
    manifest = json.loads((out / "_manifest.json").read_text())
    counts = [ingest.inspect(p, n=0) for p in inputs]
    assert [(p["path"], p["input"], p["samples"], p["groups"]) for p in manifest["parts"]] == [
        ("xdl_example.pb", inputs[0], counts[0]["samples"], counts[0]["groups"]),
        ("ads.pb", inputs[1], counts[1]["samples"], counts[1]["groups"]),
    ]
    assert manifest["samples"] == summary["samples"] == counts[0]["samples"] + counts[1]["samples"]
    # reading the directory follows the manifest: the input's order, not the names'
    ids = [s["sid"] for p in (SAMPLES / "xdl_example.txt", SAMPLES / "ads.txt") for s in _all_samples(p)]
    assert [s["sid"] for s in _all_samples(out, "pb")] == ids


@pytest.mark.parametrize("suffix", [".zst", ".lz4", ".gz"])
def test_compressed_output_reads_back(tmp_path, suffix):
    out = tmp_path / ("ads.pb" + suffix)
    convert([str(SAMPLES / "ads.txt")], str(out), aux="auto", **quiet)
    want = sorted(map(key_of, _all_samples(SAMPLES / "ads.txt")))
    assert sorted(map(key_of, _all_samples(out, "pb"))) == want


def test_pb_zst_is_written_at_level_2_and_level_1_files_still_read(tmp_path, synthetic_file):
    """convert writes .pb.zst at ZSTD_LEVEL (2: a 1 MiB window, where level 1 has 512 KiB) with the same samples as
    the plain pb; files written at level 1 before, one frame or several, read back the same."""
    import zstandard

    from ingest.sources.compression import ZSTD_LEVEL

    plain, packed = tmp_path / "s.pb", tmp_path / "s.pb.zst"
    convert([str(synthetic_file)], str(plain), aux="auto", threads=2, **quiet)
    convert([str(synthetic_file)], str(packed), aux="auto", threads=2, **quiet)
    raw, data = plain.read_bytes(), packed.read_bytes()
    assert ZSTD_LEVEL == 2
    frame = zstandard.get_frame_parameters(data)
    assert frame.window_size == 1 << 20
    assert frame.content_size == zstandard.CONTENTSIZE_UNKNOWN  # streamed: the size is not known up front
    assert zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True).read() == raw
    level_1 = zstandard.ZstdCompressor(level=1).compress(raw)
    assert zstandard.get_frame_parameters(level_1).window_size == 1 << 19
    assert len(data) < 0.97 * len(level_1)  # about 6 % smaller on the synthetic samples
    want = _all_samples(plain, "pb")
    assert len(want) == 3000
    assert _all_samples(packed, "pb") == want
    old = tmp_path / "old.pb.zst"  # as convert wrote them before: level 1, here in two frames
    one = zstandard.ZstdCompressor(level=1)
    old.write_bytes(one.compress(raw[: len(raw) // 2]) + one.compress(raw[len(raw) // 2 :]))
    assert _all_samples(old, "pb") == want


def test_bad_text_input_fails_with_a_located_error_and_leaves_no_output(tmp_path):
    src = tmp_path / "bad.txt"
    src.write_text("a|g|item@1|d@1|1\nb|g|item@x2|d@1|1\n")
    with pytest.raises(ingest.TextParseError) as err:
        convert([str(src)], str(tmp_path / "bad.pb"), **quiet)
    assert str(src) + ":2" in str(err.value) and err.value.kind == "BAD_KEY"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt"]


def test_varying_label_counts_are_refused_not_truncated(tmp_path):
    with pytest.raises(ingest.DataError, match="1 to 3 labels"):
        convert([str(SAMPLES / "edge_cases.txt")], str(tmp_path / "e.pb"), **quiet)


def test_hkeys_have_no_text_form(tmp_path):
    g = pb.SampleGroup()
    g.labels.add().values.append(1)
    g.feature_tables.add().feature_lines.add().features.add(type=pb.kSparse, name="a").values.add(key=1, hkey=2)
    src = tmp_path / "h.pb"
    src.write_bytes(frame([g.SerializeToString()]))
    with pytest.raises(ingest.DataError, match="hkey"):
        convert([str(src)], str(tmp_path / "h.txt"), **quiet)


def _one_sample_group(sample_id, features):
    """A SampleGroup of one sample with ``sample_id``; ``features``: ``[(table, name, key)]``, a line per table."""
    g = pb.SampleGroup(sample_ids=[sample_id])
    g.labels.add().values.append(1)
    for t in range(max(t for t, _, _ in features) + 1):
        line = g.feature_tables.add().feature_lines.add()
        for table, name, key in features:
            if table == t:
                line.features.add(type=pb.kSparse, name=name).values.add(key=key)
    return g.SerializeToString()


@pytest.mark.parametrize("bad", ["a|b", "c\nd"])
def test_a_sample_id_text_cannot_carry_is_refused_where_its_group_starts(tmp_path, bad):
    records = [_one_sample_group(sid, [(0, "a", 1)]) for sid in ("s0", "s1", bad, "s3")]
    src = tmp_path / "ids.pb"
    src.write_bytes(frame(records))
    with pytest.raises(ingest.DataError) as err:
        convert([str(src)], str(tmp_path / "ids.txt"), **quiet)
    e = err.value
    assert (e.kind, e.source, e.text) == ("SAMPLE_ID", str(src), bad)
    assert e.offset == sum(4 + len(r) for r in records[:2])  # the third record's length prefix
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids.pb"]


def test_a_parquet_sample_id_text_cannot_carry_is_refused_by_its_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [f"s{r}" for r in range(10)]
    ids[7] = "x|y"
    table = pa.table(
        {"sample_id": ids, "labels": pa.array([[1.0]] * 10, pa.list_(pa.float32())), "a": [[r] for r in range(10)]}
    )
    src = tmp_path / "ids.parquet"
    pq.write_table(table, src)
    with pytest.raises(ingest.DataError) as err:
        convert([str(src)], str(tmp_path / "ids.txt"), **quiet)
    assert (err.value.kind, err.value.record, err.value.text) == ("SAMPLE_ID", 7, "x|y")


def test_text_lines_carry_the_aux_features_after_the_main_ones(tmp_path):
    """The input's first group has the aux feature before the main feature ``m2`` first comes."""
    records = [
        _one_sample_group("s0", [(0, "m1", 1), (1, "x", 5)]),
        _one_sample_group("s1", [(0, "m1", 2), (0, "m2", 3), (1, "x", 6)]),
    ]
    src = tmp_path / "aux.pb"
    src.write_bytes(frame(records))
    convert([str(src)], str(tmp_path / "aux.txt"), **quiet)
    lines = (tmp_path / "aux.txt").read_text().splitlines()
    assert [line.split("|")[2] for line in lines] == ["m1@1;x@5", "m1@2;m2@3;x@6"]


def test_a_feature_name_that_is_not_utf8_is_a_located_error(tmp_path):
    """Names are looked up by their UTF-8: a name the scan could not spell so was found again and again."""
    text = tmp_path / "latin1.txt"
    text.write_bytes(b"s0|g|a@1||1\ns1|g|caf\xe9@2||1\n")
    records = tmp_path / "latin1.pb"
    feature = tag(1, 0) + b"\x01" + length_delimited(2, b"caf\xe9") + length_delimited(3, tag(1, 0) + b"\x01")
    line = length_delimited(1, feature)
    label = length_delimited(2, tag(1, 5) + struct.pack("<f", 1.0))
    data = frame([label + length_delimited(3, length_delimited(1, line))])
    records.write_bytes(data)
    for src, at in [(text, len(b"s0|g|a@1||1\ns1|g|")), (records, data.index(b"caf"))]:
        with pytest.raises(ingest.DataError) as err:
            convert([str(src)], str(tmp_path / "out.pb" if src is text else tmp_path / "out.txt"), **quiet)
        assert (err.value.kind, err.value.source, err.value.offset) == ("NAME_NOT_UTF8", str(src), at)
        assert err.value.text == "caf\ufffd"


@pytest.mark.parametrize("aux", [None, ["v", "w"]])
def test_negative_zeros_keep_their_sign_through_pb_and_back_to_text(tmp_path, aux):
    """-0.0 is not 0.0 to a reader that looks at the bits: a vector of them is written, and an aux line is shared
    only by samples whose floats have the same bits (pb -> text puts each sample's aux line back on its line)."""
    src = tmp_path / "zeros.txt"
    src.write_text("s0|g|a@1:-0.0|v@-0.0,-0.0;w@0.0,-0.0|1\ns1|g|a@1:0.0|v@0.0,0.0;w@0.0,-0.0|1\n")
    convert([str(src)], str(tmp_path / "zeros.pb"), aux=aux, **quiet)
    convert([str(tmp_path / "zeros.pb")], str(tmp_path / "back.txt"), **quiet)
    inputs = [(src, "txt"), (tmp_path / "back.txt", "txt")] + ([(tmp_path / "zeros.pb", "pb")] if aux is None else [])
    for path, file_type in inputs:
        reader = make_reader([path], sparse=["a"], dense={"v": 2, "w": 2}, file_type=file_type)
        [batch] = reader.startup().read_all()
        signs = [np.signbit(batch[name][:2]).tolist() for name in ("v", "w")]
        assert signs == [[[True, True], [False, False]], [[False, True], [False, True]]], path.name
        assert np.signbit(batch["a"].values).tolist() == [True, False], path.name


def test_cli_convert_and_inspect(tmp_path, capsys):
    out = tmp_path / "ads.pb"
    assert cli.main(["convert", str(SAMPLES / "ads.txt"), str(out), "--aux", "auto"]) == 0
    captured = capsys.readouterr()
    assert "aux features (table 1): uid, age, gender, clk_hist, cate_pref, user_emb" in captured.err
    assert cli.main(["inspect", str(out), "-n", "2", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "pb" and info["samples"] == 1000 and info["label_count"] == 2
    assert [f["name"] for f in info["tables"][1]] == ["uid", "age", "gender", "clk_hist", "cate_pref", "user_emb"]
    assert info["first"][0]["sample_id"] == "pv0_0" and "uid" in info["first"][0]
    assert cli.main(["inspect", str(xdl("sample.txt"))]) == 0
    text = capsys.readouterr().out
    assert "samples 4 in 2 groups, 2 labels" in text and "table 0: ufav3 (sparse)" in text


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert cli.main(["convert", str(SAMPLES / "ads.txt"), str(tmp_path / "x.pb"), "--aux", "nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ingest convert: ") and "nosuch" in err and "\n" not in err
    assert cli.main(["inspect", "/nonexistent.pb"]) == 2
    assert "/nonexistent.pb" in capsys.readouterr().err


def test_dask_scheduler_writes_the_same_files(tmp_path):
    """--scheduler: a Dask cluster (here an in-process one) writes one output per input."""
    from distributed import LocalCluster

    inputs = [str(SAMPLES / "ads.txt"), str(SAMPLES / "xdl_example.txt")]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        summary = convert(
            inputs, str(tmp_path / "dask") + "/", dst="pb", aux=["uid"], client=cluster.scheduler_address, **quiet
        )
    convert(inputs, str(tmp_path / "local") + "/", dst="pb", aux=["uid"], **quiet)
    assert [p.rsplit("/", 1)[1] for p in summary["outputs"]] == ["ads.pb", "xdl_example.pb"]
    for name in ("ads.pb", "xdl_example.pb"):
        assert (tmp_path / "dask" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()


def test_parallel_conversion_of_byte_ranges_keeps_order_and_groups(tmp_path, synthetic_file):
    """A 4 MB text file is cut into 1 MiB ranges that 2 threads encode; records come out in input order."""
    mid, back = tmp_path / "s.pb", tmp_path / "s.txt"
    convert([str(synthetic_file)], str(mid), aux="auto", threads=2, **quiet)
    convert([str(mid)], str(back), threads=2, **quiet)
    assert _all_samples(back) == _all_samples(synthetic_file)
    groups = [ingest.inspect(str(p), n=0)["groups"] for p in (synthetic_file, mid, back)]
    assert groups[0] == groups[1] == groups[2] > 100
