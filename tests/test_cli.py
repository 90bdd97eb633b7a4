"""The command line: ingest-bench on synthetic and real files, and its one-line errors."""

import json
import re

import pytest

import ingest
from ingest.cli import bench, main as ingest_main
from ingest.convert import convert
from conftest import SAMPLES, xdl


def test_bench_synthetic_json_counts_every_sample(capsys):
    assert bench.main(["--synthetic", "3000", "--batch-size", "256", "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 3000
    assert out["batches"] == 12
    assert out["stats"]["samples"] == 3000
    assert out["mb_per_s"] > 0 and out["samples_per_s"] > 0


def test_bench_features_auto_on_a_real_file(capsys):
    assert ingest_main.main(["bench", str(xdl("tdm.dat")), "--features", "auto", "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 5000


def test_bench_epochs_repeat_the_bundled_sample(capsys):
    assert bench.main([str(SAMPLES / "ads.txt"), "--features", "auto", "--epochs", "3", "--json"]) in (0, None)
    assert json.loads(capsys.readouterr().out)["samples"] == 3000


def test_bench_missing_input_is_a_one_line_error(capsys):
    assert bench.main(["/nonexistent/file.txt"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ingest-bench: ") and "/nonexistent/file.txt" in err and "\n" not in err


def test_bench_timeline_unique_ids_and_dsl(tmp_path, capsys):
    """--timeline writes a Chrome trace with a track per thread; --unique-ids and --dsl show in the stages."""
    conf = tmp_path / "crosses.conf"
    conf.write_text("Name=ad_x_age;Type=KV;Expr=cartesian(cate, age)\n")
    trace = tmp_path / "trace.json"
    args = [
        "--synthetic",
        "3000",
        "--batch-size",
        "512",
        "--threads",
        "2",
        "--unique-ids",
        "--dsl",
        str(conf),
        "--timeline",
        str(trace),
        "--json",
    ]
    assert bench.main(args) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 3000
    # the parse workers compute their batches' unique ids with the batches' copies, in the batch stage
    assert {"read", "parse", "ops", "batch", "wait"} <= set(out["stats"]["seconds"])
    events = json.loads(trace.read_text())  # Chrome's JSON array format, written as the run goes
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    workers = {"ingest-parse-0", "ingest-parse-1"}
    assert workers | {"MainThread"} <= set(tracks.values())
    spans = [e for e in events if e["ph"] == "X"]
    # the parse workers build their batches themselves
    assert {tracks[e["tid"]] for e in spans if e["name"] in ("batch", "unique")} <= workers
    assert sum(e["args"]["size"] for e in spans if e["name"] == "batch") == 3000
    assert sum(e["args"]["rows"] for e in spans if e["name"] == "parse") == 3000
    parsed = sum(1 for e in spans if e["name"] == "parse" and e["args"]["rows"])
    assert sum(1 for e in spans if e["name"] == "ops") == parsed
    assert all(e["dur"] >= 0 for e in spans)


def test_bench_report_shows_stages(capsys):
    assert bench.main(["--synthetic", "2000", "--no-progress"]) in (0, None)
    report = capsys.readouterr().out
    assert re.search(r"^samples +2,000 in 2 batches of 1,024, 1 thread$", report, re.M)
    [stages] = re.findall(r"^stages +(.*)$", report, re.M)
    timed = dict(re.findall(r"(\w+) [\d.]+ s \(([\d.]+) us/sample\)", stages))
    assert {"read", "parse", "batch", "wait"} <= set(timed) and float(timed["parse"]) > 0


# -- errors a new user can act on -------------------------------------------------------------------------------
def test_a_declared_feature_never_seen_is_warned_at_each_epoch_end_with_the_closest_names():
    reader = ingest.DataReader("typo", [str(SAMPLES / "ads.txt")]).label_count(2).epochs(2)
    reader.feature("itme", "sparse").feature("cate", "sparse").feature("user_emb2", "dense", nvec=8)
    with pytest.warns(ingest.UnseenFeatureWarning) as caught:
        assert sum(b.size for b in reader.startup()) == 2000
    messages = [str(w.message) for w in caught]
    assert messages == [
        "reader 'typo': feature 'itme' was declared but never seen in 1,000 samples (epoch 0); did you mean 'item'?",
        "reader 'typo': feature 'user_emb2' was declared but never seen in 1,000 samples (epoch 0); "
        "did you mean 'user_emb'?",
        "reader 'typo': feature 'itme' was declared but never seen in 1,000 samples (epoch 1); did you mean 'item'?",
        "reader 'typo': feature 'user_emb2' was declared but never seen in 1,000 samples (epoch 1); "
        "did you mean 'user_emb'?",
    ]
    assert reader.stats()["features_never_seen"] == ["itme", "user_emb2"]


def test_a_feature_never_seen_as_declared_is_told_where_the_input_has_it(tmp_path):
    reader = ingest.DataReader("kind", [str(SAMPLES / "ads.txt")]).label_count(2)
    reader.feature("item", "dense", nvec=1).feature("user_emb", "sparse")
    with pytest.warns(ingest.UnseenFeatureWarning) as caught:
        assert sum(b.size for b in reader.startup()) == 1000
    assert [str(w.message) for w in caught] == [
        "reader 'kind': feature 'user_emb' was declared but never seen in 1,000 samples (epoch 0); "
        "the input has it as a dense feature, not a sparse feature",
        "reader 'kind': feature 'item' was declared but never seen in 1,000 samples (epoch 0); "
        "the input has it as a sparse feature, not a dense feature",
    ]
    # pb: the table counts too ('user' is an aux feature, in table 1)
    src = tmp_path / "in.txt"
    src.write_text("a|g|item@1;user@7||1\nb|g|item@2;user@7||0\n")
    convert([str(src)], str(tmp_path / "out.pb"), aux=["user"], log=lambda *_: None)
    reader = ingest.DataReader("table", [str(tmp_path / "out.pb")], file_type="pb").feature("user", "sparse")
    with pytest.warns(ingest.UnseenFeatureWarning) as caught:
        assert sum(b.size for b in reader.startup()) == 2
    assert [str(w.message).split("; ")[1] for w in caught] == [
        "the input has it as a sparse feature of table 1, not a sparse feature"
    ]


def test_bench_warns_in_one_line_of_a_feature_file_name_never_seen(tmp_path, capsys):
    features = tmp_path / "features.txt"
    features.write_text("item sparse\nbrnad sparse\n")
    assert bench.main([str(SAMPLES / "ads.txt"), "--features", str(features), "--json"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warned == [
        "ingest-bench: warning: reader 'ingest-bench': feature 'brnad' was declared but never seen "
        "in 1,000 samples (epoch 0); did you mean 'brand'?"
    ]


@pytest.mark.parametrize("content", [(SAMPLES / "ads.txt").read_bytes()[:5000], bytes(range(256)) * 20])
def test_text_or_random_bytes_read_as_pb_are_said_not_to_be_records(tmp_path, capsys, content):
    path = tmp_path / "not.pb"
    path.write_bytes(content)
    assert bench.main([str(path)]) == 2
    assert ingest_main.main(["inspect", str(path)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "compiling kernels" not in line]
    assert len(errors) == 2
    for line in errors:
        assert "does not look like length-prefixed SampleGroup records" in line and str(path) in line
        assert "read as a record length give" in line or "not a field of SampleGroup" in line


def test_an_unknown_url_scheme_lists_the_supported_ones(capsys):
    assert ingest_main.main(["inspect", "nosuch://host/x.txt"]) == 2
    err = capsys.readouterr().err
    assert "unknown URL scheme 'nosuch'" in err and "hdfs://, kafka://" in err and "s3" in err


def test_convert_of_a_malformed_text_file_points_at_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    good = (SAMPLES / "ads.txt").read_bytes()[:2000].rsplit(b"\n", 1)[0] + b"\n"
    bad_line = b"x|g|item@1;cate@oops|1|1,0\n"
    bad.write_bytes(good + bad_line)
    assert ingest_main.main(["convert", str(bad), str(tmp_path / "bad.pb")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    at, line = bad_line.index(b"oops"), good.count(b"\n") + 1
    assert err.startswith(f"ingest convert: {bad}:{line}, byte {len(good) + at}, column {at + 1}, ")
    assert "key is not an integer 'oops'" in err
    assert not (tmp_path / "bad.pb").exists()


def test_outputs_that_cannot_be_written_are_refused_before_anything_is_read(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    args = [str(SAMPLES / "ads.txt")]
    assert ingest_main.main(["convert", *args, str(blocker / "out.pb")]) == 2
    assert bench.main([*args, "--timeline", str(blocker / "t.json")]) == 2
    assert bench.main([*args, f"--json={blocker / 'r.json'}"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(f"{blocker} is a file, not a folder" in e for e in errors)
    assert "aux features" not in " ".join(errors)  # refused before the input was scanned


def test_bench_json_goes_to_stdout_or_to_a_file(tmp_path, capsys):
    assert bench.main(["--json", str(SAMPLES / "ads.txt")]) == 0  # a bare --json leaves the input an input
    assert json.loads(capsys.readouterr().out)["samples"] == 1000
    assert bench.main([str(SAMPLES / "ads.txt"), f"--json={tmp_path / 'r.json'}"]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["samples"] == 1000


def test_an_unreachable_scheduler_is_an_error_within_10_s(tmp_path, capsys):
    import socket
    import time

    import distributed  # noqa: F401 - imported before the clock starts: a cold import takes seconds on a busy machine

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    args = ["convert", str(SAMPLES / "ads.txt"), str(tmp_path / "a.pb"), "--scheduler", f"tcp://127.0.0.1:{port}"]
    assert ingest_main.main(args) == 2
    assert time.monotonic() - t0 < 10
    assert f"--scheduler tcp://127.0.0.1:{port}: no Dask scheduler answered" in capsys.readouterr().err


def test_the_dsl_caret_is_on_its_own_line_under_the_expression(tmp_path, capsys):
    conf = tmp_path / "x.conf"
    conf.write_text("Name=x;Type=KV;Expr=cartesian(cate, foo(age))\n")
    assert bench.main([str(SAMPLES / "ads.txt"), "--dsl", str(conf)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-3].startswith(f"ingest-bench: {conf}:1: feature 'x': unknown function 'foo'")
    assert err[-2].strip() == "cartesian(cate, foo(age))"
    assert err[-1].index("^") == err[-2].index("foo")


def test_no_progress_bar_off_a_terminal_and_a_version(capsys):
    assert bench.main([str(SAMPLES / "ads.txt"), "--epochs", "1"]) == 0
    assert ingest_main.main(["inspect", str(SAMPLES / "ads.txt"), "-n", "0"]) == 0
    assert "samples/s" not in capsys.readouterr().err  # stderr is not a terminal here
    with pytest.raises(SystemExit) as done:
        ingest_main.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"ingest {ingest.__version__}"


def test_bench_a_dsl_file_that_cannot_be_read_is_a_one_line_error(tmp_path, capsys):
    missing = tmp_path / "missing.conf"
    assert bench.main([str(SAMPLES / "ads.txt"), "--dsl", str(missing)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"ingest-bench: --dsl {missing}: cannot read: No such file or directory"
