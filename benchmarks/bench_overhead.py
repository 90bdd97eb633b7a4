"""Python per batch: the CPU time a reader spends outside numba kernels, per batch.

Every numba kernel that Python code calls (the attributes of ingest's modules that are numba dispatchers) is
wrapped in a timer for the timed runs, after an untimed run has compiled or loaded them all.  A run's user CPU
time (``getrusage``: every thread of the process, file reads' system time left out) minus the time inside
kernels is the time in Python and in the C code Python calls (numpy, zstd), the part that holds the GIL and
that two parse threads serialize on.  Each configuration runs ``--runs`` times on one parse thread; medians
per batch of 1024 samples, with the kernel calls a batch makes.  Writes ``benchmarks/results/bench_overhead.json``.

    python benchmarks/bench_overhead.py [--samples 120000] [--runs 5] [--epochs 3]
"""

import collections
import resource
import statistics
import sys
import time

import numba.core.dispatcher

from _common import arguments, markdown_table, measured_on, save_report, synthetic_inputs
from bench_peers import BATCH_SIZE, ingest_reader

CONFIGS = [("pb", True), ("pb", False), ("txt", False)]  # (format, unique ids)


class KernelClock:
    """Wraps every numba dispatcher that ingest's modules hold as an attribute, timing each call."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = collections.Counter()
        self._undo = []

    def __enter__(self):
        wrappers = {}
        for module in [m for name, m in sys.modules.items() if name == "ingest" or name.startswith("ingest.")]:
            for attr, value in list(vars(module).items()):
                if isinstance(value, numba.core.dispatcher.Dispatcher):
                    if id(value) not in wrappers:
                        wrappers[id(value)] = self._timed(value)
                    self._undo.append((module, attr, value))
                    setattr(module, attr, wrappers[id(value)])
        return self

    def __exit__(self, *exc):
        for module, attr, value in self._undo:
            setattr(module, attr, value)

    def _timed(self, dispatcher):
        name = dispatcher.py_func.__name__

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return dispatcher(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls[name] += 1

        return timed


def user_seconds():
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def one_run(path, file_type, aux, unique, epochs):
    reader = ingest_reader(path, file_type, aux, threads=1, unique=unique, epochs=epochs)
    with KernelClock() as clock:
        reader.startup()
        cpu0 = user_seconds()
        batches = samples = 0
        for batch in reader:
            batches += 1
            samples += batch.size
        cpu = user_seconds() - cpu0
    return {
        "batches": batches,
        "samples": samples,
        "user_us_per_batch": 1e6 * cpu / batches,
        "kernel_us_per_batch": 1e6 * clock.seconds / batches,
        "outside_us_per_batch": 1e6 * (cpu - clock.seconds) / batches,
        "kernel_calls_per_batch": sum(clock.calls.values()) / batches,
        "calls": dict(clock.calls.most_common()),
    }


def main():
    parser = arguments(__doc__)
    parser.add_argument("--epochs", type=int, default=3, help="passes over the file per run (default: 3)")
    args = parser.parse_args()
    inputs = synthetic_inputs(args.samples)
    results = {}
    for fmt, unique in CONFIGS:
        path, file_type, aux = inputs["pb" if fmt == "pb" else "text"]
        warm = ingest_reader(path, file_type, aux, threads=1, unique=unique, epochs=1)
        warm.startup()
        for _ in warm:
            pass  # compiles or loads every kernel before any is wrapped
        runs = [one_run(path, file_type, aux, unique, args.epochs) for _ in range(args.runs)]
        name = f"{fmt}{', unique ids' if unique else ''}"
        results[name] = {
            key: statistics.median(r[key] for r in runs)
            for key in ("user_us_per_batch", "kernel_us_per_batch", "outside_us_per_batch", "kernel_calls_per_batch")
        }
        results[name]["calls"] = runs[-1]["calls"]
        results[name]["batches"] = runs[-1]["batches"]
    report = save_report(
        "bench_overhead", samples=args.samples, epochs=args.epochs, batch_size=BATCH_SIZE, runs=args.runs, **results
    )
    rows = [
        [
            name,
            f"{r['user_us_per_batch']:.0f}",
            f"{r['kernel_us_per_batch']:.0f}",
            f"**{r['outside_us_per_batch']:.0f}**",
            f"{r['kernel_calls_per_batch']:.1f}",
        ]
        for name, r in results.items()
    ]
    print(f"\n{measured_on(report)}, 1 parse thread, medians of {args.runs} runs, per batch of {BATCH_SIZE}:")
    print(markdown_table(["", "user CPU µs", "in kernels µs", "outside kernels µs", "kernel calls"], rows))


if __name__ == "__main__":
    main()
