"""The command line: ingest-bench on synthetic and real files, and its one-line errors."""
import json

from ingest.cli import bench, main as ingest_main
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
    args = ["--synthetic", "3000", "--batch-size", "512", "--threads", "2", "--unique-ids", "--dsl", str(conf),
            "--timeline", str(trace), "--json"]
    assert bench.main(args) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 3000
    assert {"read", "parse", "ops", "batch", "unique", "wait"} <= set(out["stats"]["seconds"])
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    workers = {"ingest-parse-0", "ingest-parse-1"}
    assert workers | {"MainThread"} <= set(tracks.values())
    spans = [e for e in events if e["ph"] == "X"]
    # the parse workers build their batches and the batches' unique ids themselves
    assert {tracks[e["tid"]] for e in spans if e["name"] in ("batch", "unique")} <= workers
    assert sum(e["args"]["size"] for e in spans if e["name"] == "batch") == 3000
    assert sum(e["args"]["rows"] for e in spans if e["name"] == "parse") == 3000
    assert sum(1 for e in spans if e["name"] == "ops") == sum(1 for e in spans if e["name"] == "parse" and e["args"]["rows"])
    assert all(e["dur"] >= 0 for e in spans)


def test_bench_report_shows_stages(capsys):
    assert bench.main(["--synthetic", "2000", "--no-progress"]) in (0, None)
    report = capsys.readouterr().out
    assert "stages" in report and "parse" in report and "wait" in report
