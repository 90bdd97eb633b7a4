"""Benchmark of the protobuf path: pb (zstd, lz4) vs text reading, file sizes, text -> pb conversion.

On the same synthetic ads samples: ``ingest convert`` to ``pb.zst`` with ``--aux auto`` (the
user features go to table 1), timed on 1 thread (MB/s of text input), and to ``pb`` and
``pb.lz4`` for their sizes; then readers over the text file and the compressed pb files
with the same features (the aux ones declared ``table=1`` for pb), 1 thread,
``batch_size(1024)``, each run a fresh reader of its file read ``PASSES`` (8) times over (a run of the pb file once
took under 0.1 s): one untimed warm-up run each, then ``--runs`` rounds reading each
file back to back; medians, and the median of the per-round ratios to text, by wall time
and by CPU time of the process (all its threads): the VM loses time to its neighbours, which
wall time counts and CPU time does not.  Prints markdown tables and writes
``benchmarks/results/bench_pb.json``.

    python benchmarks/bench_pb.py [--samples 120000] [--runs 5]
"""

import statistics
import time

import ingest
from ingest import synthetic
from ingest.convert import convert

from _common import (
    OUT,
    alternated_runs,
    arguments,
    markdown_table,
    measured_on,
    report_path,
    save_report,
    synthetic_file,
)

BATCH_SIZE = 1024
SEED = 0
PASSES = 8


def reader_for(path, file_type, aux):
    """A reader of ``path`` read ``PASSES`` times over, declaring every synthetic feature (``aux`` ones in table 1
    when given)."""
    reader = ingest.DataReader("bench_pb", paths=[str(path)], file_type=file_type)
    return synthetic.declare(reader.batch_size(BATCH_SIZE).threads(1).epochs(PASSES), aux=aux)


def convert_runs(text, out, runs):
    """Median seconds of ``runs`` text -> pb.zst conversions on 1 thread (after one warm-up)."""
    quiet = {"log": lambda *_: None}
    summary = convert([str(text)], str(out), aux="auto", threads=1, **quiet)
    seconds = []
    for _ in range(runs):
        t0 = time.perf_counter()
        convert([str(text)], str(out), aux="auto", threads=1, **quiet)
        seconds.append(time.perf_counter() - t0)
    return summary, statistics.median(seconds)


def main(argv=None):
    args = arguments(__doc__).parse_args(argv)

    text = synthetic_file(args.samples, SEED)
    pb_zst = OUT / f"{text.stem}.pb.zst"
    summary, convert_s = convert_runs(text, pb_zst, 3)
    aux = set(summary["aux"])
    quiet = {"log": lambda *_: None}
    for suffix in (".pb", ".pb.lz4"):
        convert([str(text)], str(OUT / f"{text.stem}{suffix}"), aux="auto", **quiet)
    files = {"text": text, "pb": OUT / f"{text.stem}.pb", "pb.zst": pb_zst, "pb.lz4": OUT / f"{text.stem}.pb.lz4"}
    sizes = {name: path.stat().st_size for name, path in files.items()}
    inputs = {
        "text": (text, "txt", set()),
        "pb": (files["pb"], "pb", aux),
        "pb.zst": (pb_zst, "pb", aux),
        "pb.lz4": (files["pb.lz4"], "pb", aux),
    }
    makers = {name: (lambda i=i: reader_for(*i)) for name, i in inputs.items()}
    read = alternated_runs(makers, args.samples * PASSES, args.runs)
    report = save_report(
        "bench_pb",
        samples=args.samples,
        seed=SEED,
        batch_size=BATCH_SIZE,
        runs=args.runs,
        passes=PASSES,
        aux=sorted(aux),
        sizes=sizes,
        convert_seconds=convert_s,
        convert_mb_per_s=sizes["text"] / convert_s / 1e6,
        read=read,
    )
    print(
        f"{args.samples:,} samples read {PASSES} times over a run, aux features {', '.join(sorted(aux))}; batch_size "
        f"{BATCH_SIZE}, 1 thread, median of {args.runs} rounds; {measured_on(report)}\n"
    )
    print(
        markdown_table(
            ["input", "bytes", "text / size", "samples/s", "MB/s", "vs text", "samples/CPU-s", "vs text (CPU)"],
            [
                [
                    name,
                    f"{sizes[name]:,}",
                    f"{sizes['text'] / sizes[name]:.2f}x",
                    f"{r['samples_per_s']:,.0f}",
                    f"{r['mb_per_s']:.1f}",
                    f"{r['ratio']:.2f}x",
                    f"{r['samples_per_cpu_s']:,.0f}",
                    f"{r['cpu_ratio']:.2f}x",
                ]
                for name, r in read.items()
            ],
        )
    )
    print(f"convert text -> pb.zst, 1 thread: {report['convert_mb_per_s']:.1f} MB/s of text ({convert_s:.2f} s)")
    print(f"JSON: {report_path('bench_pb')}")


if __name__ == "__main__":
    main()
