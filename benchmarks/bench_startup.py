"""Benchmark of start-up: a fresh Python process, from its first line to the first batch.

The numba kernels are compiled once and cached on disk (``cache=True``, in ``__pycache__``
next to the kernels); every later process loads them.  This runs a child process that
imports ``ingest``, declares every synthetic feature, a DSL cross and unique ids on the
bundled ``samples/ads.txt``, and takes one batch; first once (it may compile), then
``--runs`` times.  Reports the first and the median of the others (target: under 2 s).

    python benchmarks/bench_startup.py [--runs 5]
"""
import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from _common import save_report

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "ads.txt"

CHILD = f"""
import time
t0 = time.perf_counter()
import ingest
from ingest import synthetic
reader = synthetic.declare(ingest.DataReader("startup", [{str(SAMPLE)!r}])).unique_ids(True)
reader.feature("ad_x_age", "sparse", dsl="cartesian(cate, age)")
next(reader.startup())
reader.shutdown()
print(time.perf_counter() - t0)
"""


def first_batch_seconds():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    first = first_batch_seconds()
    later = [first_batch_seconds() for _ in range(args.runs)]
    report = save_report("bench_startup", first_process_s=first, later_processes_s=later,
                         median_s=statistics.median(later))
    print(f"process start to first batch: first {first:.2f} s, then median {report['median_s']:.2f} s "
          f"(min {min(later):.2f}, max {max(later):.2f}) over {args.runs} processes")


if __name__ == "__main__":
    main()
