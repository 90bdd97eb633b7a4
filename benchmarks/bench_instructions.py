"""Two revisions of ingest compared by the instructions a read executes, counted by valgrind: an A/B the VM's noise
cannot move.

On this shared VM single timed runs spread by ±25 %, so a change of a few percent to the Python around the kernels
hides in ``bench_ab.py``'s medians.  Instructions do not depend on what the other tenants do.  Each revision's
``ingest/`` and ``native/`` are extracted once under ``benchmarks/out/trees/<commit>/`` (kept, with their numba
caches); a subprocess builds the reader of ``bench_peers.py`` (1 parse thread, 1 epoch) under valgrind's callgrind
with counting off, and counting is switched on (``callgrind_control -i on``) from ``startup()`` until the last
batch.  Prints instructions per sample for each revision and their ratio, the median of ``--repeats`` alternated
counts; writes ``benchmarks/results/bench_instructions.json``.

valgrind runs code about 50 times slower, and it reports a CPU of its own to numba, whose cache then misses: the
first count of a revision and configuration compiles its kernels under valgrind (about 15 minutes for pb); later
counts reuse that cache and take a few minutes each.  Every count reads the file once uncounted first, so that no
compilation is counted.  Instructions are not time (the kernels' loops are the same
in both revisions, so a difference is the Python around them), and thread interleaving moves a count by under 1 %.

    python benchmarks/bench_instructions.py --old 462f07d --new HEAD [--formats pb] [--unique off,on] [--repeats 2]
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import OUT, markdown_table, save_report, synthetic_inputs

ROOT = Path(__file__).resolve().parent.parent
TREES = OUT / "trees"


def child(path, file_type, aux, unique, go):
    """In the subprocess, under valgrind: read once uncounted (numba compiles or loads the kernels), say READY, read
    again once ``go`` exists, say DONE, wait until it is gone."""
    from bench_peers import ingest_reader

    features = set(aux.split(",")) if aux else set()
    for _ in ingest_reader(path, file_type, features, 1, unique == "on", 1).startup():
        pass
    reader = ingest_reader(path, file_type, features, 1, unique == "on", 1)
    print("READY", os.getpid(), flush=True)
    while not os.path.exists(go):
        time.sleep(0.05)
    reader.startup()
    samples = sum(batch.size for batch in reader)
    print("DONE", samples, flush=True)
    while os.path.exists(go):
        time.sleep(0.05)


def tree(revision):
    """The folder holding ``ingest/`` (with ``native/`` as ``ingest/_native``) of ``revision``, made once."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{revision}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    where = TREES / commit
    if not (where / "ingest" / "_native").exists():
        partial = TREES / f"{commit}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit, "ingest", "native"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(partial)], input=archive, check=True)
        (partial / "native").rename(partial / "ingest" / "_native")
        partial.rename(where)
    return where


def count(where, path, file_type, aux, unique):
    """``(samples, instructions)`` of one read by the revision in ``where``."""
    with tempfile.TemporaryDirectory() as tmp:
        go = Path(tmp, "go")
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={tmp}/callgrind.out",
            sys.executable,
            __file__,
            "--child",
            str(path),
            file_type,
            ",".join(sorted(aux)),
            unique,
            str(go),
        ]
        env = {**os.environ, "PYTHONPATH": f"{where}{os.pathsep}{Path(__file__).parent}"}
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as run:
            pid = _wait_for(run, "READY")
            subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
            go.touch()
            samples = int(_wait_for(run, "DONE"))
            subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
            go.unlink()
            _, err = run.communicate()
        collected = re.search(r"Collected : (\d+)", err)
        if run.returncode or collected is None:
            raise SystemExit(f"valgrind run failed ({run.returncode}):\n{err[-3000:]}")
        return samples, int(collected.group(1))


def _wait_for(run, word):
    for line in run.stdout:
        if line.startswith(word):
            return line.split()[1]
    raise SystemExit(f"the child ended before {word}:\n{run.stderr.read()[-3000:]}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", help="git revision compared against (required)")
    parser.add_argument("--new", help="git revision measured (required)")
    parser.add_argument("--samples", type=int, default=120_000)
    parser.add_argument("--formats", default="pb", help="txt, pb or both (default: pb)")
    parser.add_argument("--unique", default="off,on", help="unique ids off, on or both (default: off,on)")
    parser.add_argument("--repeats", type=int, default=2, help="counts per revision and configuration (default: 2)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return
    if not (args.old and args.new):
        parser.error("--old and --new are required")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind and callgrind_control are needed (Debian: apt-get install valgrind)")
    inputs = synthetic_inputs(args.samples)
    trees = {"old": tree(args.old), "new": tree(args.new)}
    results = {}
    rows = []
    for fmt in args.formats.split(","):
        path, file_type, aux = inputs["text" if fmt == "txt" else "pb"]
        for unique in args.unique.split(","):
            per_sample = {"old": [], "new": []}
            for repeat in range(args.repeats):
                for side in sorted(trees, reverse=repeat % 2 == 1):  # who goes first takes turns
                    samples, instructions = count(trees[side], path, file_type, aux, unique)
                    per_sample[side].append(instructions / samples)
            key = f"{fmt}, unique ids {unique}"
            results[key] = per_sample
            old, new = (statistics.median(per_sample[side]) for side in ("old", "new"))
            rows.append([key, f"{old:,.0f}", f"{new:,.0f}", f"{new / old:.3f}x"])
    save_report("bench_instructions", old=args.old, new=args.new, samples=args.samples, per_sample=results)
    header = ["1 parse thread", f"instructions a sample, old ({args.old})", f"new ({args.new})", "new / old"]
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
