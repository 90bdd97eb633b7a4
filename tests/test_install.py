"""What a fresh install relies on: declared dependencies, optional ones imported only where used, and an
``import ingest`` that leaves fsspec's global registries as they were."""

import ast
import importlib
import importlib.metadata
import json
import pkgutil
import re
import subprocess
import sys
import tomllib

import pytest

import ingest
from ingest.optional import require
from conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirement_names(requirements):
    return {re.split(r"[\s\[<>=!~;]", r, 1)[0].lower().replace("_", "-") for r in requirements}


def _imports(path):
    """``(top-level module, imported at module level)`` of every absolute import in one source file."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module]
        found += [(n.split(".")[0], id(node) in top) for n in names]
    return found


def test_every_third_party_import_is_a_declared_dependency():
    """A module imported when ``ingest`` is imported comes from a dependency; one imported inside a function (an
    optional path) from a dependency or an extra.  A missing declaration would pass on a machine that happens to
    have the package, and break a fresh install."""
    distributions = importlib.metadata.packages_distributions()
    core = _requirement_names(PYPROJECT["dependencies"])
    extras = set().union(*(_requirement_names(r) for r in PYPROJECT["optional-dependencies"].values()))
    problems = []
    for path in sorted((ROOT / "ingest").rglob("*.py")) + sorted((ROOT / "native").rglob("*.py")):
        for module, eager in _imports(path):
            if module in sys.stdlib_module_names or module == "ingest":
                continue
            dists = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
            allowed = core if eager else core | extras
            if not dists & allowed:
                where = "at import time" if eager else "inside a function"
                problems.append(f"{path.relative_to(ROOT)} imports {module} ({', '.join(sorted(dists))}) {where}")
    assert not problems, "undeclared dependencies:\n" + "\n".join(problems)


def test_every_module_imports():
    names = [info.name for info in pkgutil.walk_packages(ingest.__path__, "ingest.")]
    for name in names:
        importlib.import_module(name)
    layers = {"ingest.reader", "ingest.formats.protobuf", "ingest.pipeline.runner", "ingest.sources.kafka.group"}
    assert layers <= set(names)  # the walk reaches every layer (one that found nothing would pass the loop)


def test_importing_and_using_ingest_leaves_fsspec_registries_alone(tmp_path):
    """Another library of the same process that opens ``hdfs://`` or ``.lz4`` URLs with fsspec gets what it would
    without ingest, also after ingest has read such files."""
    ingest.convert([str(ROOT / "samples" / "ads.txt")], str(tmp_path / "a.pb.lz4"), log=lambda *_: None)
    script = f"""
import json, fsspec, fsspec.compression
def snapshot():
    return {{"compressions": sorted(map(str, fsspec.compression.compr.items())),
             "hdfs": repr(fsspec.get_filesystem_class("hdfs")),
             "registered": sorted(str(kv) for kv in fsspec.registry.items() if kv[0] != "file")}}
before = snapshot()
import ingest
imported = snapshot()
reader = ingest.DataReader("r", [{str(tmp_path / "a.pb.lz4")!r}], file_type="pb").feature("item", "sparse")
assert sum(b.size for b in reader.label_count(2).startup()) == 1000
print(json.dumps([before, imported, snapshot()]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    before, imported, after_reading = json.loads(done.stdout)
    assert imported == before
    assert after_reading == before


def test_a_missing_optional_package_names_the_extra_that_installs_it(monkeypatch):
    with pytest.raises(ingest.ConfigError, match=r"needs the package 'nosuchpkg'.*pip install 'ingest\[extra\]'"):
        require("nosuchpkg_module", "nosuchpkg", "extra")
    monkeypatch.setitem(sys.modules, "torch", None)  # an import of torch fails, as where it is not installed
    batch = next(ingest.DataReader("t", [str(ROOT / "samples" / "ads.txt")]).feature("item", "sparse").startup())
    with pytest.raises(ingest.ConfigError, match=r"pip install 'ingest\[torch\]'"):
        batch.to_torch()
