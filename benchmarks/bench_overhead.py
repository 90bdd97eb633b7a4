"""Python per batch: the CPU time a reader spends outside numba kernels, per batch.

Every numba kernel that Python code calls (the attributes of ingest's modules that are numba dispatchers), and the
function every file read goes through (``read_into``), is wrapped in a timer of the calling thread's CPU time
(``time.thread_time``: a thread waiting for a core on a busy machine counts nothing) for the timed runs (a wrapped
call inside another, as a stream's ``read_into`` calls its file's, is counted once), after an
untimed run has compiled or loaded them all. A run's CPU time (``getrusage``: every thread of the process) minus the
time inside kernels and file reads is the time in Python and in the C code Python calls (numpy, zstd), the part that
holds the GIL and that two parse threads serialize on. The wrapper's own time outside the timed call (a Python
call, the counter), measured around a numba function that does nothing, is taken off per kernel call: it is the
benchmark's, not the reader's (``wrapper_us_per_call`` in the JSON). A run reads the file once, then ``--epochs``
times: the difference between the two, divided by the batches it adds, is the time per batch without what a reader
pays once (start-up, threads, opening the file), which the JSON reports apart (``once_ms``: a few ms, within the
runs' noise). The consumer takes nothing of a batch but its size, except in the configurations where it takes every
array (``batch.arrays()``): a reader makes a batch's arrays only when its consumer asks for them, so those show the
Python a batch costs its consumer too. Each configuration runs ``--runs`` times, the configurations in turn; medians
per batch of 1024 samples, with the kernel calls a batch makes. Writes ``benchmarks/results/bench_overhead.json``.

    python benchmarks/bench_overhead.py [--samples 120000] [--runs 5] [--epochs 4]
"""

import collections
import resource
import statistics
import sys
import threading
import time

import numba
import numba.core.dispatcher
import numpy as np

from ingest.sources import read_into

from _common import arguments, markdown_table, measured_on, save_report, synthetic_inputs
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


class KernelClock:
    """Wraps every numba dispatcher that ingest's modules hold as an attribute, and ``read_into``, timing each call
    by the CPU time of the thread that makes it."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = collections.Counter()
        self._undo = []
        self._inside = threading.local()  # a wrapped call made inside another (a stream's read_into) counts once

    def __enter__(self):
        wrappers = {}
        for module in [m for name, m in sys.modules.items() if name == "ingest" or name.startswith("ingest.")]:
            for attr, value in list(vars(module).items()):
                if isinstance(value, numba.core.dispatcher.Dispatcher) or value is read_into:
                    if id(value) not in wrappers:
                        wrappers[id(value)] = self._timed(value)
                    self._undo.append((module, attr, value))
                    setattr(module, attr, wrappers[id(value)])
        return self

    def __exit__(self, *exc):
        for module, attr, value in self._undo:
            setattr(module, attr, value)

    def _timed(self, function):
        name = getattr(function, "py_func", function).__name__

        def timed(*args, **kwargs):
            if getattr(self._inside, "depth", 0):
                return function(*args, **kwargs)
            self._inside.depth = 1
            t0 = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.thread_time() - t0  # += on a float attribute: whole under the GIL
                self.calls[name] += 1
                self._inside.depth = 0

        return timed


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
    """(batches, CPU seconds, CPU seconds in kernels and file reads, their calls) of one reader; with ``takes``, the
    consumer takes every array of every batch."""
    reader = ingest_reader(path, file_type, aux, threads=threads, unique=unique, epochs=epochs)
    with KernelClock() as clock:
        cpu0 = cpu_seconds()
        reader.startup()
        batches = sum(1 for batch in reader if not takes or batch.arrays())
        cpu = cpu_seconds() - cpu0
    return batches, cpu, clock.seconds, clock.calls


def one_run(path, file_type, aux, unique, threads, takes, epochs, wrapper):
    """Per batch: user CPU, in kernels, outside them (less ``wrapper`` seconds a kernel call) and kernel calls, from
    a run of ``epochs`` less a run of one; and the time outside kernels a reader spends once."""
    b1, cpu1, k1, calls1 = timed_read(path, file_type, aux, unique, threads, 1, takes)
    bn, cpun, kn, callsn = timed_read(path, file_type, aux, unique, threads, epochs, takes)
    added = bn - b1
    per_batch = 1e6 / added
    wrapped = wrapper * (sum(callsn.values()) - sum(calls1.values()))
    outside = per_batch * ((cpun - kn) - (cpu1 - k1) - wrapped)
    return {
        "cpu_us_per_batch": per_batch * (cpun - cpu1),
        "kernel_us_per_batch": per_batch * (kn - k1),
        "outside_us_per_batch": outside,
        "once_ms": 1e3 * (cpu1 - k1 - wrapper * sum(calls1.values())) - outside * b1 / 1e3,
        "kernel_calls_per_batch": (sum(callsn.values()) - sum(calls1.values())) / added,
        "calls": dict(callsn.most_common()),
        "batches": bn,
    }


def main():
    parser = arguments(__doc__)
    parser.add_argument("--epochs", type=int, default=4, help="passes over the file of a long run (default: 4)")
    args = parser.parse_args()
    inputs = synthetic_inputs(args.samples)
    wrapper = wrapper_seconds_per_call()
    for fmt, unique, _, _ in CONFIGS:  # compiles or loads every kernel before any is wrapped
        warm = ingest_reader(*inputs["pb" if fmt == "pb" else "text"], threads=1, unique=unique, epochs=1)
        for _ in warm.startup():
            pass
    runs = {config: [] for config in CONFIGS}
    for _ in range(args.runs):  # the configurations alternate, so that the machine's drift falls on each alike
        for config in CONFIGS:
            path, file_type, aux = inputs["pb" if config[0] == "pb" else "text"]
            runs[config].append(one_run(path, file_type, aux, *config[1:], args.epochs, wrapper))
    results = {}
    for (fmt, unique, threads, takes), done in runs.items():
        name = f"{fmt}{', unique ids' if unique else ''}, threads({threads}){', every array taken' if takes else ''}"
        keys = ("cpu_us_per_batch", "kernel_us_per_batch", "outside_us_per_batch", "once_ms", "kernel_calls_per_batch")
        results[name] = {key: statistics.median(r[key] for r in done) for key in keys}
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
            f"{r['kernel_calls_per_batch']:.1f}",
        ]
        for name, r in results.items()
    ]
    print(
        f"\n{measured_on(report)}, medians of {args.runs} runs, per batch of {BATCH_SIZE} (less {1e6 * wrapper:.2f} µs "
        "of the benchmark's wrapper a kernel call):"
    )
    print(markdown_table(["", "CPU µs", "in kernels and reads µs", "outside µs", "kernel calls"], rows))


if __name__ == "__main__":
    main()
