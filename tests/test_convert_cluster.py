"""ingest convert on a Dask cluster of 2 worker processes: byte ranges, parts, the manifest, a dead worker."""

import importlib
import json
import os
import signal

import pytest

import ingest
from ingest.cli import main as cli
from ingest.convert import convert
from ingest.errors import DataError
from ingest.parts import AtomicWriter

from conftest import read_samples

quiet = {"log": lambda *_: None}


@pytest.fixture(scope="module")
def cluster():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            yield client


def _samples(path):
    """Every sample of a text file or pb directory, features declared from the data, in order."""
    info = ingest.inspect(str(path), n=0)
    file_type = "txt" if str(path).endswith(".txt") else "pb"
    reader = ingest.DataReader("all", [str(path)], file_type=file_type).label_count(info["label_count"])
    for table, feats in enumerate(info["tables"]):
        for f in feats:
            reader.feature(f["name"], f["type"], table=table, nvec=f.get("nvec"), serialized=True)
    return read_samples(reader)


def _tree(folder):
    """Every file of ``folder`` (hidden ones too) with its bytes."""
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


def test_a_multi_range_file_becomes_parts_equal_to_the_local_conversion(tmp_path, synthetic_file, cluster):
    local = tmp_path / "local.pb"
    convert([str(synthetic_file)], str(local), aux="auto", **quiet)
    out = tmp_path / "out"
    summary = convert([str(synthetic_file)], f"{out}/", dst="pb", aux="auto", client=cluster, range_mb=0.5, **quiet)

    manifest = json.loads((out / "_manifest.json").read_text())
    names = [p["path"] for p in manifest["parts"]]
    assert len(names) >= 8 and names == [f"ads.{k:05d}.pb" for k in range(len(names))]
    assert sorted(os.listdir(out)) == ["_manifest.json", *names]  # no temporaries left
    assert summary["outputs"] == [f"{out}/{n}" for n in names]
    # ranges tile the file; records are encoded per group, so the parts are the local file cut at group starts
    ranges = [p["range"] for p in manifest["parts"]]
    assert ranges[0][0] == 0 and ranges[-1][1] == synthetic_file.stat().st_size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert b"".join((out / n).read_bytes() for n in names) == local.read_bytes()
    info = ingest.inspect(str(synthetic_file), n=0)
    assert manifest["samples"] == summary["samples"] == info["samples"] == 3000
    assert manifest["groups"] == info["groups"] == sum(p["groups"] for p in manifest["parts"])
    assert [p["samples"] for p in manifest["parts"]] == [ingest.inspect(str(out / n), n=0)["samples"] for n in names]
    # reading the directory gives the input's samples in the input's order
    assert _samples(out) == _samples(synthetic_file)


def test_compressed_parts_and_the_command_line(tmp_path, synthetic_file, cluster):
    address = cluster.scheduler.address
    out = tmp_path / "zst"
    args = [str(synthetic_file), f"{out}/", "--scheduler", address, "--range-mb", "1", "--compression", "zstd"]
    args += ["--aux", "auto", "--to", "pb"]
    assert cli.main(["convert", *args]) == 0
    names = [p["path"] for p in json.loads((out / "_manifest.json").read_text())["parts"]]
    assert len(names) == 4 and all(n.endswith(".pb.zst") for n in names)
    assert _samples(out) == _samples(synthetic_file)


def test_a_feature_the_sample_did_not_have_fails_naming_it_and_leaves_no_parts(tmp_path, cluster):
    text = tmp_path / "late.txt"
    lines = [f"s{i}|g{i}|a@{i}:1.0||1.0|{i}\n" for i in range(4000)]
    lines[3500] = "s3500|g3500|a@1:1.0;late@7:1.0||1.0|3500\n"  # past the 16 KB sample
    text.write_text("".join(lines))
    out = tmp_path / "out"
    with pytest.raises(DataError) as info:
        convert([str(text)], f"{out}/", dst="pb", client=cluster, range_mb=0.02, sample_mb=0.016, **quiet)
    err = info.value
    assert err.kind == "UNSAMPLED_FEATURE" and err.feature == "late" and err.source == str(text)
    assert "--sample-mb" in str(err) and "'late'" in str(err)
    assert not out.exists() or os.listdir(out) == []
    # a sample that holds it converts every sample
    convert([str(text)], f"{out}/", dst="pb", client=cluster, range_mb=0.02, sample_mb=1, **quiet)
    assert [s["sparse"].get("late") for s in _samples(out)][3500] == [(7, 1.0)]


def _die_once_mid_write(part, **job):
    """Stands in for ``_convert_part`` in a worker: the first call anywhere writes part of its output, then kills
    its worker process; later calls convert."""
    marker = os.path.join(os.path.dirname(os.path.dirname(part.url)), "killed")
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return _real_convert_part(part, **job)
    os.close(fd)
    AtomicWriter(part.url).write(b"half a part")
    os.kill(os.getpid(), signal.SIGKILL)


converting = importlib.import_module("ingest.convert")  # the module: ``ingest.convert`` is its function
_real_convert_part = converting._convert_part


def test_a_worker_killed_mid_part_still_gives_complete_identical_output(tmp_path, synthetic_file, cluster):
    calm = tmp_path / "calm"
    convert([str(synthetic_file)], f"{calm}/", dst="pb", aux="auto", client=cluster, range_mb=0.5, **quiet)

    cluster.run(lambda: setattr(importlib.import_module("ingest.convert"), "_convert_part", _die_once_mid_write))
    try:
        out = tmp_path / "out"
        convert([str(synthetic_file)], f"{out}/", dst="pb", aux="auto", client=cluster, range_mb=0.5, **quiet)
    finally:
        cluster.run(lambda: setattr(importlib.import_module("ingest.convert"), "_convert_part", _real_convert_part))
    assert (tmp_path / "killed").exists()  # a worker did die
    assert _tree(out) == _tree(calm)
