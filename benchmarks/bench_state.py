"""Benchmark of reader.state(): what taking the state costs while a reader with 8 work units runs.

A text file of synthetic samples is cut into 8 byte-range units (``unit_bytes``), read by 2
threads with ``enable_state=True``; after every batch the consumer takes ``state()``.  Reports
the median and p99 of ``state()`` (bar: under 1 ms), the state's size, and the samples/s of the
same read with and without taking the state after every batch (medians of alternated runs).

    python benchmarks/bench_state.py [--samples 40000] [--runs 5]
"""

import json
import statistics
import time

import numpy as np

import ingest
from ingest import synthetic
from _common import RESULTS, arguments, machine, synthetic_file


def read(path, unit_bytes, take_state):
    reader = ingest.DataReader("state", [str(path)], enable_state=True)
    synthetic.declare(reader).threads(2).batch_size(1024).unit_bytes(unit_bytes)
    costs, samples, blob = [], 0, b""
    t0 = time.perf_counter()
    reader.startup()
    with reader:
        for batch in reader:
            samples += batch.size
            if take_state:
                s0 = time.perf_counter()
                blob = reader.state()
                costs.append(time.perf_counter() - s0)
    return samples / (time.perf_counter() - t0), costs, blob


def main(argv=None):
    args = arguments(__doc__, samples=40_000).parse_args(argv)
    path = synthetic_file(args.samples)
    unit_bytes = path.stat().st_size // 8 + 1
    read(path, unit_bytes, True)  # warm-up: kernels, page cache
    costs, rates = [], {True: [], False: []}
    for _ in range(args.runs):
        for take in (False, True):
            rate, c, blob = read(path, unit_bytes, take)
            if blob:
                size, units = len(blob), json.loads(blob)["unit_count"]
            rates[take].append(rate)
            costs += c
    us = np.array(costs) * 1e6
    result = {
        "machine": machine(),
        "units": units,
        "states": len(us),
        "median_us": float(np.median(us)),
        "p99_us": float(np.percentile(us, 99)),
        "state_bytes": size,
        "samples_per_s_without": statistics.median(rates[False]),
        "samples_per_s_with_state_every_batch": statistics.median(rates[True]),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_state.json").write_text(json.dumps(result, indent=2) + "\n")
    print("| work units | state() median | p99 | state size | samples/s without | with a state per batch |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {units} | {result['median_us']:.1f} us | {result['p99_us']:.1f} us | {size} B | "
        f"{result['samples_per_s_without']:,.0f} | {result['samples_per_s_with_state_every_batch']:,.0f} |"
    )


if __name__ == "__main__":
    main()
