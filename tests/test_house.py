"""House rules, checked with every test run: layers that only look down, lint, kernels that import nothing of
ingest."""
import ast
import shutil
import subprocess

import pytest

from conftest import ROOT


def _run(command):
    if shutil.which(command[0]) is None:
        pytest.fail(f"{command[0]} is not installed: pip install -e '.[test]'")
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True)


def test_layers_only_look_down():
    """The import-linter contracts of pyproject.toml (the layers of docs/architecture.md)."""
    done = _run(["lint-imports"])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_finds_nothing():
    done = _run(["ruff", "check", "ingest", "native", "tests", "benchmarks", "examples"])
    assert done.returncode == 0, done.stdout[-4000:]


def test_mypy_finds_nothing():
    """mypy over ingest/ (pyproject.toml): the public API is annotated, and ``py.typed`` ships it."""
    done = _run(["mypy"])
    assert done.returncode == 0, done.stdout[-4000:]


def test_the_kernels_import_nothing_of_ingest():
    """native/ is the bottom layer (installed as ingest._native): arrays and scalars in, arrays out."""
    for path in sorted((ROOT / "native").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert not node.module.startswith("ingest"), f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("ingest") for a in node.names), f"{path.name} imports ingest"


def test_no_module_over_600_lines():
    """A module that outgrows 600 lines holds more than one idea: split it where the ideas part."""
    modules = sorted([*(ROOT / "ingest").rglob("*.py"), *(ROOT / "native").glob("*.py")])
    long = {str(p.relative_to(ROOT)): n for p in modules
            if p.name != "sample_pb2.py" and (n := len(p.read_text().splitlines())) > 600}
    assert long == {}
