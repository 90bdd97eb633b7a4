"""Benchmark of a fresh install's first commands: whole processes, cold (no compiled kernels) and warm.

The numba kernels are compiled on first use and cached on disk; a cold run is the first one after an
install.  Each command runs as a new process with ``NUMBA_CACHE_DIR`` pointing at an empty folder (cold),
then with the folder it filled (warm): the README's first command (``ingest-bench samples/ads.txt
--features auto --epochs 100``), ``ingest convert`` of ``samples/ads.txt`` to pb and back.  Reports the
median seconds of ``--runs`` cold and ``--runs`` warm runs of each (targets: the README command under
20 s cold and 3 s warm, a conversion under 15 s cold).

    python benchmarks/bench_startup.py [--runs 3]
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import markdown_table, measured_on, save_report

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "ads.txt"


def commands(tmp):
    pb, back = os.path.join(tmp, "ads.pb"), os.path.join(tmp, "back.txt")
    return {
        "ingest-bench (README)": ["ingest-bench", str(SAMPLE), "--features", "auto", "--epochs", "100"],
        "convert txt -> pb": ["ingest", "convert", str(SAMPLE), pb, "--aux", "auto"],
        "convert pb -> txt": ["ingest", "convert", pb, back],
    }


def seconds(command, cache):
    t0 = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env={**os.environ, "NUMBA_CACHE_DIR": cache})
    return time.perf_counter() - t0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="cold and warm runs of each command (default: 3)")
    args = parser.parse_args(argv)
    cold = {}
    warm = {}
    with tempfile.TemporaryDirectory() as tmp:
        names = list(commands(tmp))
        for _ in range(args.runs):  # each round: every command cold (in order: pb -> txt needs the pb), then warm
            cache = tempfile.mkdtemp(dir=tmp)
            for name, command in commands(tmp).items():
                cold.setdefault(name, []).append(seconds(command, cache))
            for name, command in commands(tmp).items():
                warm.setdefault(name, []).append(seconds(command, cache))
    report = save_report(
        "bench_startup",
        runs=args.runs,
        cold_s=cold,
        warm_s=warm,
        median_cold_s={n: statistics.median(cold[n]) for n in names},
        median_warm_s={n: statistics.median(warm[n]) for n in names},
    )
    print(f"whole processes, median of {args.runs}; {measured_on(report)}\n")
    print(
        markdown_table(
            ["command", "cold (s)", "warm (s)"],
            [[n, f"{report['median_cold_s'][n]:.1f}", f"{report['median_warm_s'][n]:.1f}"] for n in names],
        )
    )


if __name__ == "__main__":
    main()
