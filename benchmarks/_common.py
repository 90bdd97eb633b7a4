"""Helpers shared by the benchmarks: the synthetic input files under ``benchmarks/out/``,
a description of the machine, the JSON report, markdown tables."""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numba
import numpy as np

from ingest import synthetic
from ingest.cli.bench import measure

__all__ = [
    "OUT",
    "RESULTS",
    "arguments",
    "synthetic_file",
    "synthetic_inputs",
    "machine",
    "free_threaded",
    "save_report",
    "report_path",
    "measured_on",
    "markdown_table",
    "cost_table",
    "alternated_runs",
    "revision_tree",
]

ROOT = Path(__file__).resolve().parent.parent  # the repository
OUT = Path(__file__).resolve().parent / "out"  # input files, git-ignored
RESULTS = Path(__file__).resolve().parent / "results"  # what each benchmark measured last, kept in git


def arguments(doc, samples=120_000, runs=5):
    """The parser of a benchmark: its first docstring paragraph, ``--samples`` and (unless None) ``--runs``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=samples, help=f"synthetic samples (default: {samples})")
    if runs is not None:
        parser.add_argument("--runs", type=int, default=runs, help=f"timed runs or rounds (default: {runs})")
    return parser


def synthetic_file(samples, seed=0):
    """A text file of ``samples`` synthetic samples (``ingest.synthetic``) under ``benchmarks/out/``.

    The file is written on first use (to a ``.partial`` file renamed when complete) and
    reused afterwards: its name holds ``samples`` and ``seed``.
    """
    OUT.mkdir(exist_ok=True)
    path = OUT / f"synthetic_{samples}_seed{seed}.txt"
    if not path.exists():
        partial = path.with_suffix(".partial")
        print(f"writing {samples:,} synthetic samples to {path} ...", file=sys.stderr, flush=True)
        synthetic.write(partial, samples, seed)
        partial.replace(path)
    return path


def synthetic_inputs(samples):
    """The synthetic samples as text, and converted to ``pb`` beside it with ``--aux auto``:
    ``{"text": (path, "txt", set()), "pb": (path, "pb", aux)}``, with the aux feature names to declare in
    table 1."""
    from ingest.convert import convert

    text = synthetic_file(samples)
    pb = OUT / f"{text.stem}.pb"
    aux = set(convert([str(text)], str(pb), aux="auto", log=lambda *_: None)["aux"])
    return {"text": (text, "txt", set()), "pb": (pb, "pb", aux)}


def converted(text, suffix):
    """The synthetic text file ``text`` converted by ``ingest convert`` to the format of ``suffix`` (``.pb.zst``, with
    ``--aux auto`` as ``synthetic_inputs``' pb; ``.parquet``) beside it.  A Parquet file is kept once written; a pb.zst
    is written each time (a kept one may be of an older zstd level)."""
    from ingest.convert import convert

    path = OUT / f"{text.stem}{suffix}"
    if suffix == ".pb.zst" or not path.exists():
        print(f"writing {path} ...", file=sys.stderr, flush=True)
        partial = path.with_name("partial-" + path.name)  # its extension names the format
        convert([str(text)], str(partial), aux="auto" if suffix == ".pb.zst" else None, log=lambda *_: None)
        os.replace(partial, path)
    return path


def free_threaded():
    """Whether this interpreter runs without the GIL (free-threaded CPython: python3.14t,
    ``scripts/free-threaded-python.sh``)."""
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED")) and not sys._is_gil_enabled()


def machine():
    """Cores, CPU model and versions of what is measured, as a dict."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version() + ("t" if free_threaded() else ""),
        "numpy": np.__version__,
        "numba": numba.__version__,
    }


def save_report(name, **fields):
    """The report of benchmark ``name`` (the date, the machine and ``fields``), written to
    ``benchmarks/results/<name>.json`` (``<name>.free-threaded.json`` on a free-threaded interpreter, whose figures
    sit beside the others')."""
    report = {"date": datetime.date.today().isoformat(), "machine": machine(), **fields}
    RESULTS.mkdir(exist_ok=True)
    report_path(name).write_text(json.dumps(report, indent=2) + "\n")
    return report


def report_path(name):
    """Where ``save_report`` writes benchmark ``name``'s report on this interpreter."""
    return RESULTS / f"{name}{'.free-threaded' if free_threaded() else ''}.json"


def measured_on(report):
    """Where and when a report was measured: ``"<cores> cores (<cpu>), Python <version>, <date>"`` (a free-threaded
    Python's version ends in t)."""
    m = report["machine"]
    return f"{m['nproc']} cores ({m['cpu']}), Python {m['python']}, {report['date']}"


def markdown_table(header, rows):
    """A markdown table (str): ``header`` is a list of column titles, ``rows`` lists of cells."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def cost_table(results, on_title):
    """The markdown table of what turning a feature on costs: ``results`` maps ``"<input> <threads>"`` to
    ``{"off": ..., "on": ...}`` of ``alternated_runs`` or ``interleaved_blocks``; ``on_title`` heads the column
    of samples/s when on."""
    rows = []
    for key, r in results.items():
        name, threads = key.rsplit(" ", 1)
        off, on = r["off"], r["on"]
        rows.append(
            [
                name,
                threads,
                f"{off['samples_per_s']:,.0f}",
                f"{on['samples_per_s']:,.0f}",
                f"{1 - on['ratio']:.1%}",
                f"{1 - on['cpu_ratio']:.1%}",
            ]
        )
    return markdown_table(["input", "threads", "samples/s off", on_title, "cost (wall)", "cost (CPU)"], rows)


def interleaved_blocks(reader, work, seconds, block=100, warm_up=4):
    """What calling ``work(batch)`` on every batch costs ``reader`` (not started; reading without end,
    ``epochs(0)``), measured within one run: for ``seconds``, ``block`` batches without it, then ``block`` with it,
    and so on; the first ``warm_up`` blocks are left out.  Whole runs, alternated, spread by ±10 % on this shared
    VM; neighbouring blocks, a fraction of a second apart, do not.  Returns ``{"off": ..., "on": ...}`` as
    ``cost_table`` takes it: samples/s and samples per CPU second (the whole process) over each side's blocks,
    and on the "on" side the medians over pairs of neighbouring blocks of the ratios on / off."""
    blocks = []  # (with work, samples, seconds, CPU seconds)
    with reader:
        batches = iter(reader.startup())
        end = time.perf_counter() + seconds
        while time.perf_counter() < end or len(blocks) % 2:
            on = len(blocks) % 2 == 1
            samples, t0, c0 = 0, time.perf_counter(), time.process_time()
            for _ in range(block):
                batch = next(batches)
                if on:
                    work(batch)
                samples += batch.size
            blocks.append((on, samples, time.perf_counter() - t0, time.process_time() - c0))
    pairs = list(zip(blocks[warm_up::2], blocks[warm_up + 1 :: 2]))
    out = {}
    for side, which in (("off", 0), ("on", 1)):
        chosen = [pair[which] for pair in pairs]
        out[side] = {
            "samples_per_s": sum(b[1] for b in chosen) / sum(b[2] for b in chosen),
            "samples_per_cpu_s": sum(b[1] for b in chosen) / sum(b[3] for b in chosen),
            "blocks": len(chosen),
            "ratio": statistics.median(on[1] / on[2] / (off[1] / off[2]) for off, on in pairs) if which else 1.0,
            "cpu_ratio": statistics.median(on[1] / on[3] / (off[1] / off[3]) for off, on in pairs) if which else 1.0,
        }
    return out


def alternated_runs(makers, samples, runs, warmups=1):
    """``warmups`` runs of each, then ``runs`` rounds running each reader of ``makers`` (name -> () -> DataReader)
    back to back.  A maker may instead run its reading itself and return what ``measure`` returns (at least
    ``samples``, ``seconds``, ``samples_per_s``, ``mb_per_s``, ``cpu_seconds`` and ``samples_per_cpu_s``).

    The VM is noisy over minutes, so runs alternate; ratios to the first entry are the
    medians of the per-round ratios, by wall time and by CPU time of the whole process.
    Every run must deliver ``samples`` samples.
    """

    def run(make):
        made = make()
        return made if isinstance(made, dict) else measure(made)

    for _ in range(warmups):
        for make in makers.values():
            run(make)
    rounds = []
    for _ in range(runs):
        one = {}
        for name, make in makers.items():
            one[name] = run(make)
            if one[name]["samples"] != samples:
                raise SystemExit(f"{name}: {one[name]['samples']} samples, expected {samples}")
        rounds.append(one)
    first = next(iter(makers))
    out = {}
    for name in makers:
        runs_of = [r[name] for r in rounds]
        out[name] = {
            "samples_per_s": statistics.median(r["samples_per_s"] for r in runs_of),
            "mb_per_s": statistics.median(r["mb_per_s"] for r in runs_of),
            "samples_per_cpu_s": statistics.median(r["samples_per_cpu_s"] for r in runs_of),
            "cores": statistics.median(r["cpu_seconds"] / r["seconds"] for r in runs_of),
            "runs": [r["samples_per_s"] for r in runs_of],
            "ratio": statistics.median(r[name]["samples_per_s"] / r[first]["samples_per_s"] for r in rounds),
            "cpu_ratio": statistics.median(
                r[name]["samples_per_cpu_s"] / r[first]["samples_per_cpu_s"] for r in rounds
            ),
        }
        if all("sleeps" in r for r in runs_of):  # a maker that counted its threads' sleeps (bench_scaling)
            out[name]["sleeps_per_batch"] = statistics.median(r["sleeps"] / r["batches"] for r in runs_of)
    return out


def revision_tree(revision, into):
    """``ingest/`` and ``native/`` of the git ``revision`` under ``into``, native as ``ingest/_native``: with ``into``
    first on ``PYTHONPATH``, a subprocess imports that revision's ingest instead of the installed one."""
    into.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "ingest", "native"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "native").rename(into / "ingest" / "_native")
    return into
