"""Conversion on a Dask cluster: one 1 GB text file to pb.zst on 1 and 2 single-threaded workers, and locally.

The synthetic samples (``--samples``: 770,000 make about 1 GB of text) are converted with ``--aux auto`` into a
directory of zstd parts three ways, alternated round by round: on a ``LocalCluster`` of 1 worker process and
on one of 2 (each ``threads_per_worker=1``; both clusters stay up, the idle one costs nothing), the file cut into
``--range-mb`` ranges (default: ``ingest convert``'s 256), one task each; and locally (``threads`` = the cores,
one output file).  Each is timed from the call to ``convert`` to its return: finding the features in the first
16 MB, the tasks, the manifest.  One warm-up round (the workers compile or load the kernels), then ``--runs``
rounds; medians of MB/s of input and samples/s, and the medians of the per-round ratios to the 1-worker
cluster.  Target: 2 workers at least 1.7x 1 worker.  The feature check each task makes first (a scan of its
range for features the sample did not have) is timed alone too, on this process, as MB/s of one core.
Writes ``benchmarks/results/bench_convert.json``.

    python benchmarks/bench_convert.py [--samples 770000] [--runs 3] [--range-mb 256]
"""

import os
import shutil
import statistics
import time

from _common import OUT, arguments, markdown_table, measured_on, save_report, synthetic_file
from ingest.convert import RANGE_MB, convert
from ingest.discover import scan_features
from ingest.sources import expand_paths, plan_units


def main(argv=None):
    parser = arguments(__doc__, samples=770_000, runs=3)
    parser.add_argument("--range-mb", type=float, default=RANGE_MB, help=f"range size (default: {RANGE_MB})")
    args = parser.parse_args(argv)
    from distributed import Client, LocalCluster

    text = synthetic_file(args.samples)
    size = text.stat().st_size
    out = OUT / "bench_convert"
    quiet = {"log": lambda *_: None}

    def run(client):
        shutil.rmtree(out, ignore_errors=True)
        kind = {"client": client, "range_mb": args.range_mb} if client else {}
        t0 = time.perf_counter()
        summary = convert([str(text)], f"{out}/", dst="pb", aux="auto", compression="zstd", **kind, **quiet)
        seconds = time.perf_counter() - t0
        if summary["samples"] != args.samples:
            raise SystemExit(f"{summary['samples']} samples converted, expected {args.samples}")
        return {"seconds": seconds, "parts": len(summary["outputs"])}

    clusters = {
        n: LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) for n in (1, 2)
    }
    try:
        clients = {f"{n} worker{'s' if n > 1 else ''}": Client(c) for n, c in clusters.items()}
        ways = {**clients, f"local ({os.cpu_count()} threads)": None}
        for client in ways.values():  # warm-up
            run(client)
        rounds = [{name: run(client) for name, client in ways.items()} for _ in range(args.runs)]
        for client in clients.values():
            client.close()
    finally:
        for c in clusters.values():
            c.close()
    shutil.rmtree(out, ignore_errors=True)

    units = plan_units(expand_paths([str(text)]), unit_bytes=int(args.range_mb * (1 << 20)))
    scans = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        scan_features(units[:1], "txt")
        scans.append(time.perf_counter() - t0)
    first = units[0].end - units[0].start if units[0].end else size

    base = next(iter(ways))
    results = {}
    for name in ways:
        seconds = statistics.median(r[name]["seconds"] for r in rounds)
        results[name] = {
            "seconds": seconds,
            "mb_per_s": size / 1e6 / seconds,
            "samples_per_s": args.samples / seconds,
            "parts": rounds[0][name]["parts"],
            "runs": [r[name]["seconds"] for r in rounds],
            "ratio": statistics.median(r[base]["seconds"] / r[name]["seconds"] for r in rounds),
        }
    check = {"mb_per_s": first / 1e6 / statistics.median(scans), "runs": scans}
    report = save_report(
        "bench_convert",
        input={"samples": args.samples, "bytes": size, "range_mb": args.range_mb},
        results=results,
        feature_check=check,
    )
    rows = [
        [
            name,
            r["parts"],
            f"{r['seconds']:.1f}",
            f"{r['mb_per_s']:.0f}",
            f"{r['samples_per_s'] / 1e3:.0f}k",
            f"{r['ratio']:.2f}x",
        ]
        for name, r in results.items()
    ]
    print(f"{size / 1e9:.2f} GB text -> pb.zst, {measured_on(report)}")
    print(markdown_table(["", "parts", "s", "MB/s", "samples/s", f"vs {base}"], rows))
    print(f"feature check of a task: {check['mb_per_s']:.0f} MB/s on one core")


if __name__ == "__main__":
    main()
