"""Ray Data: samples/s of ``ingest.ray.read_samples`` against the reader itself, on one machine.

The synthetic samples as pb (``--aux auto``: the user features in table 1; 1M samples make 8 work units),
every feature declared, ``batch_size(4096)``: the reader with ``threads(1)``, the same with ``batch.to_arrow()``
of every batch (the read tasks' own work), and ``read_samples`` of that reader on a local Ray of 2 CPUs,
iterated by the driver with ``iter_batches(batch_size=4096, batch_format="pyarrow")`` (2 read tasks at a time).
One warm-up each, then ``--runs``; medians, and the ratio of ``read_samples`` to the reader.  Needs
``ray[data]``.  Writes ``benchmarks/results/bench_ray.json``.

    python benchmarks/bench_ray.py [--samples 1000000] [--runs 3]
"""

import statistics
import time

import ingest
import ingest.ray
from ingest import synthetic

from _common import arguments, markdown_table, measured_on, save_report, synthetic_inputs

BATCH_SIZE = 4096


def main(argv=None):
    args = arguments(__doc__, samples=1_000_000, runs=3).parse_args(argv)
    import ray

    path, file_type, aux = synthetic_inputs(args.samples)["pb"]

    def reader():
        made = ingest.DataReader("bench_ray", paths=[str(path)], file_type=file_type)
        return synthetic.declare(made.batch_size(BATCH_SIZE).threads(1), aux=aux, serialized=True)

    def raw(arrow):
        n, t0 = 0, time.perf_counter()
        with reader().startup() as r:
            for batch in r:
                if arrow:
                    batch.to_arrow()
                n += batch.size
        return n, time.perf_counter() - t0

    def on_ray():
        n, t0 = 0, time.perf_counter()
        for table in ingest.ray.read_samples(reader()).iter_batches(batch_size=BATCH_SIZE, batch_format="pyarrow"):
            n += table.num_rows
        return n, time.perf_counter() - t0

    ways = {"reader, threads(1)": lambda: raw(False), "reader, threads(1), to_arrow()": lambda: raw(True)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        ways["read_samples, local Ray of 2 CPUs"] = on_ray
        results = {}
        for name, run in ways.items():
            run()
            runs = [run() for _ in range(args.runs)]
            if any(n != args.samples for n, _ in runs):
                raise SystemExit(f"{name}: {[n for n, _ in runs]} samples, expected {args.samples}")
            results[name] = {"samples_per_s": statistics.median(n / s for n, s in runs), "runs": [s for _, s in runs]}
    finally:
        ray.shutdown()
    base = results["reader, threads(1)"]["samples_per_s"]
    for r in results.values():
        r["ratio"] = r["samples_per_s"] / base
    report = save_report("bench_ray", samples=args.samples, batch_size=BATCH_SIZE, runs=args.runs, results=results)
    print(f"Ray Data, pb, {args.samples:,} samples, {measured_on(report)}")
    rows = [[name, f"{r['samples_per_s'] / 1e3:,.0f}k", f"{r['ratio']:.2f}x"] for name, r in results.items()]
    print(markdown_table(["", "samples/s", "vs reader"], rows))


if __name__ == "__main__":
    main()
