"""Benchmark of text -> batches: parse throughput over synthetic ads samples, 1 and 2 threads, beside two processes.

Three ways of ``bench_scaling.py`` (``scaling_runs``), alternated run by run after a warm-up run of each: a
``threads(2)`` reader, a ``threads(1)`` reader, and the two-process control (two processes, each a ``threads(1)``
reader of one shard, started together: what the machine gives two cores that share nothing of Python).  The
readers are ``bench_peers.py``'s (every synthetic feature, ``batch_size(1024)``), each run a fresh reader of the file
read ``EPOCHS["txt"]`` (3) times over, about a second.  Reports the medians of MB/s and samples/s, per core (divided
by the cores a way uses), the spread of MB/s, and the ratios of 2 threads to 1 thread and to the two processes
(medians of per-round ratios).  Prints a markdown table and writes ``benchmarks/results/bench_text.json``.

    python benchmarks/bench_text.py [--samples 120000] [--runs 5]
"""

from _common import arguments, markdown_table, measured_on, report_path, save_report, synthetic_file
from bench_peers import BATCH_SIZE, EPOCHS
from bench_scaling import scaling_runs

SEED = 0


def main(argv=None):
    args = arguments(__doc__).parse_args(argv)

    path = synthetic_file(args.samples, SEED)
    passes = EPOCHS["txt"]
    results = scaling_runs(path, "txt", set(), False, args.samples, args.runs, ways=("2 threads", "1 thread"))
    mb_per_sample = path.stat().st_size / args.samples / 1e6
    # ratios to "2 threads", the first way, turned over: medians of per-round ratios
    ratios = {f"2 threads / {way}": 1 / results[way]["ratio"] for way in ("1 thread", "2 processes")}
    report = save_report(
        "bench_text",
        samples=args.samples,
        bytes=path.stat().st_size,
        seed=SEED,
        batch_size=BATCH_SIZE,
        passes=passes,
        runs=args.runs,
        results=results,
        ratios=ratios,
    )
    print(
        f"{args.samples:,} samples, {report['bytes'] / 1e6:,.1f} MB read {passes} times over a run, batch_size "
        f"{BATCH_SIZE}, median of {args.runs} alternated rounds; {measured_on(report)}\n"
    )
    rows = []
    for way, cores in (("2 threads", 2), ("1 thread", 1), ("2 processes", 2)):
        r = results[way]
        rows.append(
            [
                way,
                f"{r['mb_per_s']:.1f}",
                f"{r['samples_per_s']:,.0f}",
                f"{r['mb_per_s'] / cores:.1f}",
                f"{r['samples_per_s'] / cores:,.0f}",
                f"{min(r['runs']) * mb_per_sample:.1f}-{max(r['runs']) * mb_per_sample:.1f}",
            ]
        )
    print(markdown_table(["way", "MB/s", "samples/s", "MB/s per core", "samples/s per core", "MB/s min-max"], rows))
    print("\n" + ", ".join(f"{name}: {value:.2f}x" for name, value in ratios.items()))
    print(f"JSON: {report_path('bench_text')}")


if __name__ == "__main__":
    main()
