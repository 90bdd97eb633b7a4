"""Compiling the kernels: the notice of a cold start, and warmers that compile exactly what a run then loads."""

import json
import subprocess
import sys

import pytest

from conftest import SAMPLES

# a child process that records which kernels of ingest numba compiles (rather than loads from the cache) while it runs
# CODE
_RECORDING = """
import json, sys
from numba.core import event
compiled = set()
class Recorder(event.Listener):
    def on_start(self, ev):
        function = ev.data["dispatcher"].py_func
        if function.__module__.startswith("ingest._native"):
            compiled.add(function.__name__)
    def on_end(self, ev):
        pass
event.register("numba:compile", Recorder())
{code}
print(json.dumps(sorted(compiled)))
"""


def _run(code, cache, cwd):
    done = subprocess.run(
        [sys.executable, "-c", _RECORDING.format(code=code)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**__import__("os").environ, "NUMBA_CACHE_DIR": str(cache)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.splitlines()[-1])), done.stderr


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "numba-cache"


def test_a_cold_start_says_what_it_compiles_and_a_warm_one_says_nothing(cache, tmp_path):
    run = f"from ingest.cli import bench; bench.main([{str(SAMPLES / 'ads.txt')!r}, '--json'])"
    compiled, err = _run(run, cache, tmp_path)
    assert {"parse_text_chunk", "scan_names"} <= compiled
    assert "ingest: compiling kernels (scan-text, text, batch), once per install: ~" in err
    compiled, err = _run(run, cache, tmp_path)
    assert not compiled and "compiling" not in err


@pytest.mark.parametrize("unique", [False, True])
def test_the_batch_warmer_compiles_what_a_reader_of_that_schema_loads(cache, tmp_path, unique):
    reader = (
        f"import ingest\nfrom ingest import synthetic\n"
        f"r = synthetic.declare(ingest.DataReader('w', [{str(SAMPLES / 'ads.txt')!r}])).unique_ids({unique})\n"
    )
    warm = reader + (
        "import dataclasses\nfrom ingest.pipeline.batcher import warm\n"
        "warm({'specs': [dataclasses.asdict(s) for s in r.schema.specs], 'label_count': 2, "
        f"'batch_size': 1024, 'pad': True, 'unique': {unique}}})"
    )
    warmed, _ = _run(warm, cache, tmp_path)
    assert {"copy_pieces", "measure_piece", "batch_layout"} <= warmed
    compiled, _ = _run(reader + "sum(b.size for b in r.startup())", cache, tmp_path)
    assert "parse_text_chunk" in compiled  # not warmed: the reader compiles it
    assert not compiled & warmed


def test_the_conversion_warmers_compile_what_a_conversion_loads(cache, tmp_path):
    out = tmp_path / "ads.pb"
    convert = "import ingest\ningest.convert([{src!r}], {dst!r}, threads=1, log=lambda *_: None{aux})"
    module = "import importlib\nconvert = importlib.import_module('ingest.convert')\n"
    warmed, _ = _run(module + "convert.warm_encoder({'simple': False})", cache, tmp_path)
    compiled, _ = _run(convert.format(src=str(SAMPLES / "ads.txt"), dst=str(out), aux=", aux='auto'"), cache, tmp_path)
    assert {"encode_groups", "identical_features"} <= warmed and not compiled & warmed
    both = "convert.warm_decoder({'simple': False})\nconvert.warm_text_side({'simple': False})"
    warmed, _ = _run(module + both, cache, tmp_path)
    compiled, _ = _run(convert.format(src=str(out), dst=str(tmp_path / "back.txt"), aux=""), cache, tmp_path)
    assert {"decode_chunk", "scan_record_names", "write_text_rows"} <= warmed and not compiled & warmed


def test_a_cache_index_naming_a_type_that_is_gone_compiles_again(tmp_path, monkeypatch):
    """An index an earlier version wrote that names a bundle since renamed or removed is stale: the kernel compiles
    again (numba alone raised AttributeError when it unpickled such an index)."""
    source = "from ingest._native.jit import kernel\n\n\nclass Gone:\n    pass\n\n\n"
    (tmp_path / "stale_kernels.py").write_text(source + "@kernel\ndef plus_one(x):\n    return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import stale_kernels

    assert stale_kernels.plus_one(1) == 2
    index = stale_kernels.plus_one._cache._cache_file
    index._save_index({"an overload of an earlier version": stale_kernels.Gone})
    del stale_kernels.Gone
    assert index._load_index() == {}
    stale_kernels.plus_one._cache.flush()
    stale_kernels.plus_one.overloads.clear()
    assert stale_kernels.plus_one(41) == 42
