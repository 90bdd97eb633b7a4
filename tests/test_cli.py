"""The command line: ingest-bench on synthetic and real files, and its one-line errors."""
import json

from ingest.cli import bench, main as ingest_main
from conftest import SAMPLES, XDL


def test_bench_synthetic_json_counts_every_sample(capsys):
    assert bench.main(["--synthetic", "3000", "--batch-size", "256", "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 3000
    assert out["batches"] == 12
    assert out["stats"]["samples"] == 3000
    assert out["mb_per_s"] > 0 and out["samples_per_s"] > 0


def test_bench_features_auto_on_a_real_file(capsys):
    assert ingest_main.main(["bench", str(XDL / "tdm.dat"), "--features", "auto", "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["samples"] == 5000


def test_bench_epochs_repeat_the_bundled_sample(capsys):
    assert bench.main([str(SAMPLES / "ads.txt"), "--features", "auto", "--epochs", "3", "--json"]) in (0, None)
    assert json.loads(capsys.readouterr().out)["samples"] == 3000


def test_bench_missing_input_is_a_one_line_error(capsys):
    assert bench.main(["/nonexistent/file.txt"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ingest-bench: ") and "/nonexistent/file.txt" in err and "\n" not in err
