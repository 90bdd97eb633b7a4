"""Benchmark of memory: the reader's RSS must stay flat while it reads a big file.

Writes a big synthetic text file under ``benchmarks/out/`` (default 800000 samples, about
1 GB; reused when present), reads it with ``threads(2)`` and ``batch_size(1024)``, and
samples the RSS of the process after every batch.  Prints the RSS at 10, 25, 50, 75 and
100 % of the samples read and the peak; passes (exit 0) when the peak is within 1.25x of
the RSS at 25 % (exit 1 otherwise).

    python benchmarks/bench_memory.py [--samples 800000]
"""

import os
import sys

import numpy as np

import ingest
from ingest import synthetic

from _common import arguments, machine, markdown_table, save_report, synthetic_file

POINTS = (10, 25, 50, 75, 100)
LIMIT = 1.25
THREADS = 2
BATCH_SIZE = 1024

try:
    import psutil

    _PROCESS = psutil.Process()

    def rss_mb():
        """Resident set size of this process now, in MB."""
        return _PROCESS.memory_info().rss / 1e6
except ImportError:  # psutil comes with the "bench" extra; Linux without it
    _PAGE = os.sysconf("SC_PAGE_SIZE")

    def rss_mb():
        """Resident set size of this process now, in MB (``/proc/self/statm``)."""
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE / 1e6


def read_sampling_rss(path):
    """Read ``path`` with every synthetic feature; returns (samples read after each batch, RSS after it)."""
    reader = synthetic.declare(ingest.DataReader("bench_memory", paths=[str(path)]))
    reader.threads(THREADS).batch_size(BATCH_SIZE).startup()
    sizes, rss = [], []
    try:
        for batch in reader:
            sizes.append(batch.size)
            rss.append(rss_mb())
    finally:
        reader.shutdown()
    return np.cumsum(sizes), np.array(rss)


def main(argv=None):
    args = arguments(__doc__, samples=800_000, runs=None).parse_args(argv)

    path = synthetic_file(args.samples)
    before = rss_mb()
    read, rss = read_sampling_rss(path)
    if not len(read) or read[-1] != args.samples:
        raise SystemExit(f"bench_memory: read {read[-1] if len(read) else 0} samples, expected {args.samples}")
    # the first batch at or past each point
    at = dict(zip(POINTS, rss[np.searchsorted(read, np.array(POINTS) * args.samples / 100)]))
    peak = rss.max()
    ratio = peak / at[25]

    m = machine()
    print(
        f"{args.samples:,} samples, {path.stat().st_size / 1e6:,.1f} MB, threads {THREADS}, "
        f"batch_size {BATCH_SIZE}; {m['nproc']} cores ({m['cpu']})\n"
    )
    print(
        markdown_table(
            ["read", "RSS (MB)"],
            [["before startup", f"{before:,.0f}"]]
            + [[f"{p} %", f"{at[p]:,.0f}"] for p in POINTS]
            + [["peak", f"{peak:,.0f}"]],
        )
    )
    passed = ratio <= LIMIT
    save_report(
        "bench_memory",
        samples=args.samples,
        threads=THREADS,
        batch_size=BATCH_SIZE,
        rss_mb={"before": before, **{f"{p}%": float(at[p]) for p in POINTS}, "peak": float(peak)},
        peak_over_25=float(ratio),
        passed=bool(passed),
    )
    print(f"\npeak / RSS at 25 %: {ratio:.3f} (limit {LIMIT}): {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
