"""House rules, checked with every test run: layers that only look down, lint, types, kernels that import nothing
of ingest and pass their twin tests as plain Python, modules of one idea, functions of at most 12 arguments."""

import ast
import os
import shutil
import subprocess
import sys

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


CODE = ["ingest", "native", "tests", "benchmarks", "examples", "scripts"]


def test_ruff_finds_nothing():
    done = _run(["ruff", "check", *CODE])
    assert done.returncode == 0, done.stdout[-4000:]


def test_ruff_format_changes_nothing():
    """The code is as ``ruff format`` writes it (pyproject.toml: lines of 120)."""
    done = _run(["ruff", "format", "--check", *CODE])
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
    long = {
        str(p.relative_to(ROOT)): n
        for p in modules
        if p.name != "sample_pb2.py" and (n := len(p.read_text().splitlines())) > 600
    }
    assert long == {}


def test_no_function_takes_more_than_12_arguments():
    """Arrays that travel together go as one bundle (architecture.md), options as one object."""
    modules = sorted([*(ROOT / "ingest").rglob("*.py"), *(ROOT / "native").glob("*.py")])
    wide = {}
    for p in modules:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                if count > 12:
                    wide[f"{p.relative_to(ROOT)}:{node.name}"] = count
    assert wide == {}


# the tests that compare kernels with their slow twins (and the reader paths over them)
TWIN_TESTS = [
    "tests/test_text_kernel.py",
    "tests/test_protobuf.py",
    "tests/test_dsl.py",
    "tests/test_unique.py",
    "tests/test_batcher.py",
    "tests/test_trace_kernel.py",
    "tests/test_ops.py",
    "tests/test_kafka_fetch.py",
    "tests/test_scan_kernels.py",
    "tests/test_convert_kernels.py",
]


def test_twin_tests_pass_with_the_kernels_as_python():
    """``NUMBA_DISABLE_JIT=1``: the kernels run as Python, where an index past an array's end raises and integer
    arithmetic is checked, which compiled code lets pass (numpy's overflow warnings are left out: the digit
    accumulators wrap on purpose, and their callers count digits)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::RuntimeWarning", *TWIN_TESTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NUMBA_DISABLE_JIT": "1"},
    )
    assert done.returncode == 0, done.stdout[-6000:]
