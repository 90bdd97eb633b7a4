"""Benchmark of text -> batches: parse throughput over synthetic ads samples, 1 and 2 threads.

For each thread count: one untimed warm-up run, then ``--runs`` timed runs, each a fresh
reader over the whole file with every synthetic feature declared (11 sparse, 2 dense,
2 labels) and ``batch_size(1024)``.  Reports the medians of MB/s and samples/s, per core
(divided by the threads), and the ratio 2 threads / 1 thread.  Prints a markdown table and
writes ``benchmarks/results/bench_text.json``.

    python benchmarks/bench_text.py [--samples 120000] [--runs 5]
"""

import statistics

import ingest
from ingest import synthetic
from ingest.cli.bench import measure, per_core

from _common import RESULTS, arguments, markdown_table, measured_on, save_report, synthetic_file

THREADS = (1, 2)
BATCH_SIZE = 1024
SEED = 0


def one_run(path, threads):
    """``measure`` one fresh reader over ``path`` (without its stats)."""
    reader = synthetic.declare(ingest.DataReader("bench_text", paths=[str(path)]))
    result = measure(reader.batch_size(BATCH_SIZE).threads(threads))
    del result["stats"]
    return result


def bench(path, samples, threads, runs):
    """Warm-up, then ``runs`` timed runs with ``threads``; returns the medians and every run."""
    one_run(path, threads)
    timed = [one_run(path, threads) for _ in range(runs)]
    wrong = [r["samples"] for r in timed if r["samples"] != samples]
    if wrong:
        raise SystemExit(f"bench_text: read {wrong[0]} samples, expected {samples}")
    columns = {key: [r[key] for r in timed] for key in ("seconds", "mb_per_s", "samples_per_s", "p50_ms", "p99_ms")}
    medians = {key: None if None in values else statistics.median(values) for key, values in columns.items()}
    return {**medians, **per_core(medians, threads), "runs": timed}


def main(argv=None):
    args = arguments(__doc__).parse_args(argv)

    path = synthetic_file(args.samples, SEED)
    results = [bench(path, args.samples, threads, args.runs) for threads in THREADS]
    ratio = results[1]["mb_per_s"] / results[0]["mb_per_s"]
    report = save_report(
        "bench_text",
        samples=args.samples,
        bytes=path.stat().st_size,
        seed=SEED,
        batch_size=BATCH_SIZE,
        runs=args.runs,
        results=results,
        ratio_2_threads_to_1=ratio,
    )
    print(
        f"{args.samples:,} samples, {report['bytes'] / 1e6:,.1f} MB, batch_size {BATCH_SIZE}, "
        f"median of {args.runs} runs; {measured_on(report)}\n"
    )
    print(
        markdown_table(
            ["threads", "MB/s", "samples/s", "MB/s per core", "samples/s per core", "MB/s min-max"],
            [
                [
                    r["threads"],
                    f"{r['mb_per_s']:.1f}",
                    f"{r['samples_per_s']:,.0f}",
                    f"{r['mb_per_s_per_core']:.1f}",
                    f"{r['samples_per_s_per_core']:,.0f}",
                    f"{min(x['mb_per_s'] for x in r['runs']):.1f}-{max(x['mb_per_s'] for x in r['runs']):.1f}",
                ]
                for r in results
            ],
        )
    )
    print(f"\n2 threads / 1 thread: {ratio:.2f}x")
    print(f"JSON: {RESULTS / 'bench_text.json'}")


if __name__ == "__main__":
    main()
