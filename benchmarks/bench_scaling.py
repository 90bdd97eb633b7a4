"""How ingest scales from 1 thread to 2, and from 1 core to 2: text and pb, unique ids off and on.

A ``threads(1)`` reader's consumer (and, where batches follow one block stream, its batcher and
unique-id threads) can use part of a second core, so its throughput need not be what one core
delivers.  This benchmark reads the synthetic samples of ``bench_peers.py`` (every
feature, ``batch_size(1024)``, text read 3 times over a run, pb 8 times) three ways, alternated run by
run:

- ``1 thread``: ``threads(1)``, the process free to use every core (the bar's "1 thread");
- ``1 core``: ``threads(1)`` with every thread of the reader pinned to one core (``sched_setaffinity``
  before ``startup()``: the pipeline's threads inherit it);
- ``2 threads``: ``threads(2)`` on every core.

One warm-up run each, then ``--runs`` rounds.  Reports medians of samples/s, the cores the process
kept busy (CPU seconds over wall seconds), and the ratios of ``2 threads`` to ``1 thread`` and to
``1 core`` (``alternated_runs``' medians of per-round ratios to ``2 threads``, turned over).  Writes
``benchmarks/out/bench_scaling.json``.  Linux only.

    python benchmarks/bench_scaling.py [--samples 120000] [--runs 5]
"""
import os

from _common import OUT, alternated_runs, arguments, markdown_table, measured_on, save_report, synthetic_inputs
from bench_peers import EPOCHS, ingest_reader

# name: threads, and the cores the reader's threads may run on; "2 threads" first, the ratios' base
WAYS = {"2 threads": (2, None), "1 thread": (1, None), "1 core": (1, 1)}


def main(argv=None):
    args = arguments(__doc__).parse_args(argv)
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        raise SystemExit("needs at least 2 cores")

    def maker(path, file_type, aux, unique, threads, cores):
        def make():
            # the reader's threads start in startup() and inherit this thread's affinity
            os.sched_setaffinity(0, set(sorted(allowed)[:cores]) if cores else allowed)
            return ingest_reader(path, file_type, aux, threads, unique, EPOCHS[file_type])
        return make

    results = {}
    try:
        for name, (path, file_type, aux) in synthetic_inputs(args.samples).items():
            for unique in (False, True):
                results[f"{name} {'on' if unique else 'off'}"] = alternated_runs(
                    {way: maker(path, file_type, aux, unique, *how) for way, how in WAYS.items()},
                    args.samples * EPOCHS[file_type], args.runs)
    finally:
        os.sched_setaffinity(0, allowed)
    report = save_report("bench_scaling", samples=args.samples, runs=args.runs, epochs=EPOCHS, read=results)
    print(f"{args.samples:,} samples (read {EPOCHS['txt']} times over in text, {EPOCHS['pb']} in pb), batch_size "
          f"1024, median of {args.runs} alternated rounds; {measured_on(report)}\n")
    ways = ["1 thread", "1 core", "2 threads"]
    rows = []
    for key, r in results.items():  # ratios of the others to 2 threads, turned over
        rows.append(key.split() + [f"{r[way]['samples_per_s']:,.0f} ({r[way]['cores']:.2f})" for way in ways]
                    + [f"{1 / r['1 thread']['ratio']:.2f}x", f"{1 / r['1 core']['ratio']:.2f}x"])
    print(markdown_table(["input", "unique ids"] + [f"{way}: samples/s (cores)" for way in ways]
                         + ["2 threads / 1 thread", "2 threads / 1 core"], rows))
    print(f"JSON: {OUT / 'bench_scaling.json'}")


if __name__ == "__main__":
    main()
