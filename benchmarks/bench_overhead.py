"""Python per batch: the CPU time a reader spends outside numba kernels, per batch.

Every numba kernel that Python code calls (the attributes of ingest's modules that are numba dispatchers, or
``TypedCalls`` on a free-threaded build), and the
function every file read goes through (``read_into``), is wrapped in a timer of the calling thread's CPU time
(``time.thread_time``: a thread waiting for a core on a busy machine counts nothing) for the timed runs (a wrapped
call inside another, as a stream's ``read_into`` calls its file's, is counted once), after an
untimed run has compiled or loaded them all. A run's CPU time (``getrusage``: every thread of the process) minus the
time inside kernels and file reads is the time in Python and in the C code Python calls (numpy, zstd), the part that
holds the GIL and that two parse threads serialize on. The wrapper's own time outside the timed call (a Python
call, the counter), measured around a numba function that does nothing, is taken off per kernel call: it is the
benchmark's, not the reader's (``wrapper_us_per_call`` in the JSON). Where it goes: the Python methods of each of
``STAGES`` (a batch's build; the making of a chunk's Block around its kernels) are timed the same way, less the
kernels and reads they call (``stage_us_per_batch``); the rest is a unit's read loop, the pipeline's stages and queues
and the consumer's loop. A run reads the file once, then ``--epochs``
times: the difference between the two, divided by the batches it adds, is the time per batch without what a reader
pays once (start-up, threads, opening the file), which the JSON reports apart (``once_ms``: a few ms, within the
runs' noise). The consumer takes nothing of a batch but its size, except in the configurations where it takes every
array (``batch.arrays()``): a reader makes a batch's arrays only when its consumer asks for them, so those show the
Python a batch costs its consumer too. Each configuration runs ``--runs`` times, the configurations in turn; medians
per batch of 1024 samples, with the kernel calls a batch makes and the CPU time of the consumer's thread (all of
it, kernels included: with ``threads(0)`` it reads too; with parse threads it only takes batches, waiting for them
when it is ahead). Writes ``benchmarks/results/bench_overhead.json``.

The VM's speed moves these figures by a fifth or more over an hour, more than a change to the Python around the
kernels does. ``--old REV`` compares two revisions in the same hour: each run of every configuration in a subprocess
of the installed ingest and one of ``REV``'s (``git archive``, imported first), taking turns going first; it reports
the medians of both and the median of the per-run ratios new / old, with the medians of each stage (a stage's
methods that a revision lacks count nothing), and writes ``benchmarks/results/bench_overhead_vs_old.json``.

    python benchmarks/bench_overhead.py [--samples 120000] [--runs 5] [--epochs 4] [--old REV]
"""

import argparse
import collections
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numba
import numba.core.dispatcher
import numpy as np

import ingest._native.jit
from ingest.formats.base import Room
from ingest.formats.protobuf import ProtobufFormat
from ingest.formats.text import TextFormat
from ingest.pipeline.batcher import BatchBuilder
from ingest.sources import read_into

from _common import arguments, markdown_table, measured_on, revision_tree, save_report, synthetic_inputs
from bench_peers import BATCH_SIZE, ingest_reader

# (format, unique ids, parse threads, the consumer takes every array): threads(0) reads in the consumer's thread,
# with no batch handed between threads; a consumer that takes every array (``batch.arrays()``: the views of every
# feature and unique-id output) pays the Python that a batch's arrays cost, which a reader leaves to it
CONFIGS = [
    ("pb", True, 1, False),
    ("pb", True, 0, False),
    ("pb", True, 1, True),
    ("pb", True, 0, True),
    ("pb", False, 1, False),
    ("pb", False, 0, False),
    ("txt", False, 1, False),
]

# what Python calls a kernel by: numba's dispatcher, or on a free-threaded build ``TypedCalls`` (timed with the kernel:
# its lookup of the compiled version is what numba's dispatch does there); an older revision (``--old``) has none
KERNELS = (
    numba.core.dispatcher.Dispatcher,
    getattr(ingest._native.jit, "TypedCalls", ()),
)  # isinstance takes nested tuples

# the Python methods of each stage whose time outside kernels the table shows beside the whole (``KernelClock``)
STAGES = {
    "batch build": [(BatchBuilder, "assemble"), (BatchBuilder, "add_unique")],
    "chunk's block": [(Room, "columns"), (ProtobufFormat, "_block"), (TextFormat, "_block")],
}


class _ThreadClock(threading.local):
    """A thread's own count of its wrapped calls: whether one is under way (``depth``: a wrapped call made inside
    another, as a stream's ``read_into`` calls its file's, counts once), and their seconds and number so far."""

    depth = 0
    seconds = 0.0
    calls = 0


class KernelClock:
    """Wraps every numba dispatcher that ingest's modules hold as an attribute, and ``read_into``, timing each call
    by the CPU time of the thread that makes it; and the methods of ``STAGES``, timing each call's CPU time outside
    the kernels and reads it makes (``stage_seconds``)."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = collections.Counter()
        self.stage_seconds = collections.Counter()
        self.stage_calls = collections.Counter()  # a stage's calls, and the kernel calls made inside them
        self.stage_kernel_calls = collections.Counter()
        self._undo = []
        self._inside = _ThreadClock()
        self._adding = threading.Lock()  # threads add to the totals at once; without a GIL a += can lose one

    def __enter__(self):
        wrappers = {}
        for module in [m for name, m in sys.modules.items() if name == "ingest" or name.startswith("ingest.")]:
            for attr, value in list(vars(module).items()):
                if isinstance(value, KERNELS) or value is read_into:
                    if id(value) not in wrappers:
                        wrappers[id(value)] = self._timed(value)
                    self._undo.append((module, attr, value))
                    setattr(module, attr, wrappers[id(value)])
        for stage, methods in STAGES.items():
            for owner, attr in methods:
                if attr in vars(owner):  # another revision (``--old``) may lack one
                    self._undo.append((owner, attr, vars(owner)[attr]))
                    setattr(owner, attr, self._staged(vars(owner)[attr], stage))
        return self

    def __exit__(self, *exc):
        for module, attr, value in self._undo:
            setattr(module, attr, value)

    def _timed(self, function):
        name = getattr(function, "py_func", function).__name__

        def timed(*args, **kwargs):
            if self._inside.depth:
                return function(*args, **kwargs)
            self._inside.depth = 1
            t0 = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                took = time.thread_time() - t0
                self._inside.seconds += took
                self._inside.calls += 1
                with self._adding:
                    self.seconds += took
                    self.calls[name] += 1
                self._inside.depth = 0

        return timed

    def _staged(self, method, stage):
        def staged(*args, **kwargs):
            k0, c0 = self._inside.seconds, self._inside.calls
            t0 = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                took = time.thread_time() - t0
                inside = self._inside.seconds - k0  # this thread's kernels and reads meanwhile
                with self._adding:
                    self.stage_seconds[stage] += took - inside
                    self.stage_calls[stage] += 1
                    self.stage_kernel_calls[stage] += self._inside.calls - c0

        return staged


def wrapper_seconds_per_call(calls=200_000):
    """CPU time a ``KernelClock`` wrapper adds outside the time it counts, per call: the median of 5 measurements
    around a numba function that does nothing, called with three arrays."""

    @numba.njit(nogil=True)
    def nothing(a, b, c):
        return 0

    a = np.zeros(8)
    nothing(a, a, a)
    clock = KernelClock()
    timed = clock._timed(nothing)
    added = []
    for _ in range(5):
        clock.seconds = 0.0
        t0 = time.thread_time()
        for _ in range(calls):
            timed(a, a, a)
        added.append((time.thread_time() - t0 - clock.seconds) / calls)
    return statistics.median(added)


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed_read(path, file_type, aux, unique, threads, epochs, takes):
    """(batches, CPU seconds, the consumer's thread's CPU seconds, the ``KernelClock``) of one reader; with ``takes``,
    the consumer takes every array of every batch."""
    reader = ingest_reader(path, file_type, aux, threads=threads, unique=unique, epochs=epochs)
    with KernelClock() as clock:
        cpu0, consumer0 = cpu_seconds(), time.thread_time()
        reader.startup()
        batches = sum(1 for batch in reader if not takes or batch.arrays())
        cpu, consumer = cpu_seconds() - cpu0, time.thread_time() - consumer0
    return batches, cpu, consumer, clock


def one_run(path, file_type, aux, unique, threads, takes, epochs, wrapper):
    """Per batch: user CPU, in kernels, outside them and in each of ``STAGES`` (less ``wrapper`` seconds a wrapped
    call), and kernel calls, from a run of ``epochs`` less a run of one; and the time outside kernels a reader spends
    once."""
    b1, cpu1, consumer1, clock1 = timed_read(path, file_type, aux, unique, threads, 1, takes)
    bn, cpun, consumern, clockn = timed_read(path, file_type, aux, unique, threads, epochs, takes)
    added = bn - b1
    per_batch = 1e6 / added

    def outside_kernels(clock, cpu):  # the stages' wrappers cost as the kernels' do
        return cpu - clock.seconds - wrapper * (sum(clock.calls.values()) + sum(clock.stage_calls.values()))

    def in_stage(clock, stage):
        return clock.stage_seconds[stage] - wrapper * clock.stage_kernel_calls[stage]

    outside = per_batch * (outside_kernels(clockn, cpun) - outside_kernels(clock1, cpu1))
    calls1, callsn = sum(clock1.calls.values()), sum(clockn.calls.values())
    return {
        "cpu_us_per_batch": per_batch * (cpun - cpu1),
        "kernel_us_per_batch": per_batch * (clockn.seconds - clock1.seconds),
        "outside_us_per_batch": outside,
        "stage_us_per_batch": {
            stage: per_batch * (in_stage(clockn, stage) - in_stage(clock1, stage)) for stage in STAGES
        },
        "consumer_us_per_batch": per_batch * (consumern - consumer1),
        "once_ms": 1e3 * outside_kernels(clock1, cpu1) - outside * b1 / 1e3,
        "kernel_calls_per_batch": (callsn - calls1) / added,
        "calls": dict(clockn.calls.most_common()),
        "batches": bn,
    }


def measured(inputs, runs, epochs):
    """``{config: [one_run's result of each run]}``, every kernel compiled or loaded first, the configurations
    alternating run by run (so that the machine's drift falls on each alike)."""
    wrapper = wrapper_seconds_per_call()
    for fmt, unique, _, _ in CONFIGS:  # compiles or loads every kernel before any is wrapped
        warm = ingest_reader(*inputs["pb" if fmt == "pb" else "text"], threads=1, unique=unique, epochs=1)
        for _ in warm.startup():
            pass
    results = {config: [] for config in CONFIGS}
    for _ in range(runs):
        for config in CONFIGS:
            path, file_type, aux = inputs["pb" if config[0] == "pb" else "text"]
            results[config].append(one_run(path, file_type, aux, *config[1:], epochs, wrapper))
    return results, wrapper


def config_name(config):
    fmt, unique, threads, takes = config
    return f"{fmt}{', unique ids' if unique else ''}, threads({threads}){', every array taken' if takes else ''}"


def against_old(args, inputs):
    """``--old``: each run of every configuration in a subprocess of this revision's ingest (the installed one) and
    one of ``args.old``'s, which take turns going first; medians, and the median of the per-run ratios new / old of
    the time outside kernels a batch, with the medians of each of ``STAGES``."""
    outside = {"old": [], "new": []}  # per run, per configuration: outside kernels, then each stage
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = revision_tree(args.old, Path(tmp, "old").resolve())
        for run in range(args.runs):
            for side in ("old", "new") if run % 2 == 0 else ("new", "old"):
                path = [str(old_tree)] if side == "old" else []
                done = subprocess.run(
                    [sys.executable, __file__, "--child", "--samples", str(args.samples), "--epochs", str(args.epochs)],
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(path + [str(Path(__file__).parent)])},
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                )
                if done.returncode:
                    raise SystemExit(f"{side} failed:\n{done.stderr[-3000:]}")
                outside[side].append(json.loads(done.stdout.splitlines()[-1]))
    rows, report = [], {}
    for k, config in enumerate(CONFIGS):
        old, new = ([r[k][0] for r in outside[side]] for side in ("old", "new"))
        ratio = statistics.median(n / o for o, n in zip(old, new))
        stages = {
            stage: {side: statistics.median(r[k][1 + j] for r in outside[side]) for side in ("old", "new")}
            for j, stage in enumerate(STAGES)
        }
        report[config_name(config)] = {"old_us": old, "new_us": new, "new_over_old": ratio, "stages_us": stages}
        rows.append(
            [config_name(config), f"{statistics.median(old):.0f}", f"**{statistics.median(new):.0f}**", f"{ratio:.2f}x"]
            + [f"{stages[stage]['old']:.0f} → {stages[stage]['new']:.0f}" for stage in STAGES]
        )
    saved = save_report(
        "bench_overhead_vs_old", old=args.old, samples=args.samples, epochs=args.epochs, runs=args.runs, **report
    )
    print(
        f"\n{measured_on(saved)}, medians of {args.runs} runs alternated with {args.old}, µs outside kernels a batch:"
    )
    stage_columns = [f"of it: {stage}, old → new" for stage in STAGES]
    print(markdown_table(["", f"old ({args.old})", "new", "new / old", *stage_columns], rows))


def main():
    parser = arguments(__doc__)
    parser.add_argument("--epochs", type=int, default=4, help="passes over the file of a long run (default: 4)")
    parser.add_argument("--old", help="a git revision to alternate with, run by run, in subprocesses")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    inputs = synthetic_inputs(args.samples)
    if args.child:  # one run of each configuration: its time outside kernels a batch, then each stage's, as JSON
        runs, _ = measured(inputs, 1, args.epochs)
        print(json.dumps([[r["outside_us_per_batch"], *r["stage_us_per_batch"].values()] for (r,) in runs.values()]))
        return
    if args.old:
        against_old(args, inputs)
        return
    runs, wrapper = measured(inputs, args.runs, args.epochs)
    results = {}
    for config, done in runs.items():
        name = config_name(config)
        keys = (
            "cpu_us_per_batch",
            "kernel_us_per_batch",
            "outside_us_per_batch",
            "consumer_us_per_batch",
            "once_ms",
            "kernel_calls_per_batch",
        )
        results[name] = {key: statistics.median(r[key] for r in done) for key in keys}
        results[name]["stage_us_per_batch"] = {
            stage: statistics.median(r["stage_us_per_batch"][stage] for r in done) for stage in STAGES
        }
        results[name]["calls"] = done[-1]["calls"]
        results[name]["batches"] = done[-1]["batches"]
    report = save_report(
        "bench_overhead",
        samples=args.samples,
        epochs=args.epochs,
        batch_size=BATCH_SIZE,
        runs=args.runs,
        wrapper_us_per_call=1e6 * wrapper,
        **results,
    )
    rows = [
        [
            name,
            f"{r['cpu_us_per_batch']:.0f}",
            f"{r['kernel_us_per_batch']:.0f}",
            f"**{r['outside_us_per_batch']:.0f}**",
            *(f"{r['stage_us_per_batch'][stage]:.0f}" for stage in STAGES),
            f"{r['consumer_us_per_batch']:.0f}",
            f"{r['kernel_calls_per_batch']:.1f}",
        ]
        for name, r in results.items()
    ]
    print(
        f"\n{measured_on(report)}, medians of {args.runs} runs, per batch of {BATCH_SIZE} (less {1e6 * wrapper:.2f} µs "
        "of the benchmark's wrapper a kernel call), the time outside kernels of each stage's Python methods beside "
        "the whole:"
    )
    stages = [f"of it: {stage} µs" for stage in STAGES]
    header = ["", "CPU µs", "in kernels and reads µs", "outside µs", *stages, "consumer's thread µs", "kernel calls"]
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
