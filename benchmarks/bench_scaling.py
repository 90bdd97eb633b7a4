"""How ingest scales from 1 thread to 2, and from 1 core to 2: text and pb, unique ids off and on.

``threads(n)`` counts parse workers; the batcher, the unique-id thread and the consumer run beside
them.  So ``threads(1)`` on a 2-core machine uses part of the second core too, and its throughput is
not what one core delivers.  This benchmark reads the synthetic samples of ``bench_peers.py`` (every
feature, ``batch_size(1024)``, text read 3 times over a run, pb 8 times) three ways, alternated run by
run:

- ``1 thread``: ``threads(1)``, the process free to use every core (the bar's "1 thread");
- ``1 core``: ``threads(1)`` with every thread of the reader pinned to one core (``sched_setaffinity``
  before ``startup()``: the pipeline's threads inherit it);
- ``2 threads``: ``threads(2)`` on every core.

One warm-up run each, then ``--runs`` rounds.  Reports medians of samples/s, the cores the process
kept busy (CPU seconds over wall seconds), and the ratios of ``2 threads`` to ``1 thread`` and to
``1 core`` (medians of per-round ratios).  Writes ``benchmarks/out/bench_scaling.json``.  Linux only.

    python benchmarks/bench_scaling.py [--samples 120000] [--runs 5]
"""
import os
import statistics
from contextlib import contextmanager

from ingest.cli.bench import measure

from _common import OUT, arguments, markdown_table, measured_on, save_report, synthetic_inputs
from bench_peers import EPOCHS, ingest_reader

WAYS = {"1 thread": (1, False), "1 core": (1, True), "2 threads": (2, False)}  # name: threads, pinned


@contextmanager
def pinned(pin):
    """With ``pin``, this thread (and every thread it starts) runs on its first allowed core only."""
    allowed = os.sched_getaffinity(0)
    if pin:
        os.sched_setaffinity(0, {min(allowed)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def run(path, file_type, aux, unique, way):
    threads, pin = WAYS[way]
    with pinned(pin):
        return measure(ingest_reader(path, file_type, aux, threads, unique, EPOCHS[file_type]))


def main(argv=None):
    args = arguments(__doc__).parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs at least 2 cores")
    results = {}
    for name, (path, file_type, aux) in synthetic_inputs(args.samples).items():
        for unique in (False, True):
            for way in WAYS:
                run(path, file_type, aux, unique, way)  # warm-up
            rounds = [{way: run(path, file_type, aux, unique, way) for way in WAYS} for _ in range(args.runs)]
            result = results[f"{name} {'on' if unique else 'off'}"] = {
                way: {"samples_per_s": statistics.median(r[way]["samples_per_s"] for r in rounds),
                      "cores": statistics.median(r[way]["cpu_seconds"] / r[way]["seconds"] for r in rounds),
                      "runs": [r[way]["samples_per_s"] for r in rounds]} for way in WAYS}
            for base in ("1 thread", "1 core"):
                result[f"2 threads / {base}"] = statistics.median(
                    r["2 threads"]["samples_per_s"] / r[base]["samples_per_s"] for r in rounds)
    report = save_report("bench_scaling", samples=args.samples, runs=args.runs, epochs=EPOCHS, read=results)
    print(f"{args.samples:,} samples (read {EPOCHS['txt']} times over in text, {EPOCHS['pb']} in pb), batch_size "
          f"1024, median of {args.runs} alternated rounds; {measured_on(report)}\n")
    rows = []
    for key, r in results.items():
        rows.append(key.split() + [f"{r[way]['samples_per_s']:,.0f} ({r[way]['cores']:.2f})" for way in WAYS]
                    + [f"{r['2 threads / 1 thread']:.2f}x", f"{r['2 threads / 1 core']:.2f}x"])
    print(markdown_table(["input", "unique ids"] + [f"{way}: samples/s (cores)" for way in WAYS]
                         + ["2 threads / 1 thread", "2 threads / 1 core"], rows))
    print(f"JSON: {OUT / 'bench_scaling.json'}")


if __name__ == "__main__":
    main()
