"""Benchmark of trace files: what ``reader.trace()`` of every batch costs the reader, text and pb, 1 and 2 threads.

The readers of ``bench_peers.py`` (every synthetic feature, ``batch_size(1024)``; pb converted with
``--aux auto``, the user features in table 1; the samples read ``EPOCHS`` times over in a run), each read
without a trace and with ``reader.trace(TraceWriter(...), arrays=("labels", "item.ids", "cate.ids"))``: the
labels, the sample ids and two features' ids of every batch, written to local files under
``benchmarks/out/``.  A traced run is timed from ``startup()`` to the writer's ``close()`` returning (every
record on disk).  Off and on alternate run by run: one warm-up run each, then ``--runs`` rounds; the cost is 1
minus the median of the per-round ratios on/off, by wall time and by CPU time of the whole process.  Bar: at
most 3 %.  Writes ``benchmarks/results/bench_trace.json``.

    python benchmarks/bench_trace.py [--samples 120000] [--runs 5]
"""

import shutil
import time

from _common import (
    OUT,
    RESULTS,
    alternated_runs,
    arguments,
    cost_table,
    measured_on,
    save_report,
    synthetic_inputs,
)
from bench_peers import EPOCHS, THREADS, ingest_reader

from ingest.cli.bench import measure
from ingest.trace import TraceWriter

TRACED = ("labels", "item.ids", "cate.ids")  # and the sample ids, which every traced batch holds


def traced_run(path, file_type, aux, threads):
    """One traced run, timed until its trace files are closed, as ``measure`` reports it."""
    folder = OUT / "trace"
    shutil.rmtree(folder, ignore_errors=True)
    reader = ingest_reader(path, file_type, aux, threads, False, EPOCHS[file_type])
    c0, t0 = time.process_time(), time.perf_counter()
    writer = TraceWriter(folder)
    reader.trace(writer, arrays=TRACED)
    run = measure(reader)
    writer.close()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    run.update(
        seconds=seconds,
        cpu_seconds=cpu,
        samples_per_s=run["samples"] / seconds,
        mb_per_s=run["bytes"] / seconds / 1e6,
        samples_per_cpu_s=run["samples"] / cpu,
    )
    shutil.rmtree(folder)
    return run


def main(argv=None):
    args = arguments(__doc__).parse_args(argv)
    inputs = synthetic_inputs(args.samples)
    results = {}
    for name, (path, file_type, aux) in inputs.items():
        for threads in THREADS:
            results[f"{name} {threads}"] = alternated_runs(
                {
                    "off": lambda p=path, f=file_type, a=aux, t=threads: ingest_reader(p, f, a, t, False, EPOCHS[f]),
                    "on": lambda p=path, f=file_type, a=aux, t=threads: traced_run(p, f, a, t),
                },
                args.samples * EPOCHS[file_type],
                args.runs,
            )
    report = save_report(
        "bench_trace", samples=args.samples, epochs=EPOCHS, runs=args.runs, traced=TRACED, read=results
    )
    print(
        f"{args.samples:,} samples read {EPOCHS} times over, batch_size 1024, traced: {', '.join(TRACED)} and the "
        f"sample ids of every batch; median of {args.runs} alternated rounds; {measured_on(report)}\n"
    )
    print(cost_table(results, "samples/s traced"))
    print(f"JSON: {RESULTS / 'bench_trace.json'}")


if __name__ == "__main__":
    main()
