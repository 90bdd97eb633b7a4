"""Benchmark of the protobuf path: pb (zstd) vs text reading, file sizes, and text -> pb conversion.

On the same synthetic ads samples: ``ingest convert`` to ``pb.zst`` with ``--aux auto`` (the
user features go to table 1), timed on 1 thread (MB/s of text input); then readers over
the text file and over the pb file with the same features (the aux ones declared
``table=1`` for pb), 1 thread, ``batch_size(1024)``: one untimed warm-up run each, then
``--runs`` rounds of a text run and a pb run back to back; medians, and the median of the
per-round ratios.  Prints markdown tables and writes
``benchmarks/out/bench_pb.json``.

    python benchmarks/bench_pb.py [--samples 120000] [--runs 5]
"""
import argparse
import datetime
import json
import statistics
import time

import ingest
from ingest import synthetic
from ingest.cli.bench import measure
from ingest.convert import convert

from _common import OUT, machine, markdown_table, synthetic_file

BATCH_SIZE = 1024
SEED = 0


def reader_for(path, file_type, aux):
    """A reader over ``path`` declaring every synthetic feature (``aux`` ones in table 1 when given)."""
    reader = ingest.DataReader("bench_pb", paths=[str(path)], file_type=file_type)
    reader.label_count(synthetic.LABEL_COUNT).batch_size(BATCH_SIZE).threads(1)
    for name in synthetic.SPARSE:
        reader.feature(name=name, type="sparse", table=1 if name in aux else 0)
    for name, nvec in synthetic.DENSE.items():
        reader.feature(name=name, type="dense", nvec=nvec, table=1 if name in aux else 0)
    return reader


def read_runs(text, pb_zst, aux, samples, runs):
    """Warm-up, then ``runs`` rounds of one text run and one pb.zst run back to back.

    The VM is noisy over minutes, so runs alternate and the ratio is the median of the
    per-round ratios.
    """
    measure(reader_for(text, "txt", set()))
    measure(reader_for(pb_zst, "pb", aux))
    rounds = []
    for _ in range(runs):
        t = measure(reader_for(text, "txt", set()))
        p = measure(reader_for(pb_zst, "pb", aux))
        if t["samples"] != samples or p["samples"] != samples:
            raise SystemExit(f"bench_pb: read {t['samples']} and {p['samples']} samples, expected {samples}")
        rounds.append((t, p))

    def medians(runs_of):
        return {"samples_per_s": statistics.median(r["samples_per_s"] for r in runs_of),
                "mb_per_s": statistics.median(r["mb_per_s"] for r in runs_of),
                "runs": [r["samples_per_s"] for r in runs_of]}

    ratio = statistics.median(p["samples_per_s"] / t["samples_per_s"] for t, p in rounds)
    return medians([t for t, _ in rounds]), medians([p for _, p in rounds]), ratio


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=120_000, help="synthetic samples (default: 120000)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs (default: 5)")
    args = parser.parse_args(argv)

    text = synthetic_file(args.samples, SEED)
    pb_zst = OUT / f"{text.stem}.pb.zst"
    summary, convert_s = convert_runs(text, pb_zst, 3)
    aux = set(summary["aux"])
    pb_plain = OUT / f"{text.stem}.pb"
    convert([str(text)], str(pb_plain), aux="auto", log=lambda *_: None)
    sizes = {"text": text.stat().st_size, "pb": pb_plain.stat().st_size, "pb.zst": pb_zst.stat().st_size}
    text_read, pb_read, ratio = read_runs(text, pb_zst, aux, args.samples, args.runs)
    report = {"date": datetime.date.today().isoformat(), "machine": machine(), "samples": args.samples,
              "seed": SEED, "batch_size": BATCH_SIZE, "runs": args.runs, "aux": sorted(aux), "sizes": sizes,
              "convert_seconds": convert_s, "convert_mb_per_s": sizes["text"] / convert_s / 1e6,
              "text": text_read, "pb_zst": pb_read,
              "pb_to_text_samples_ratio": ratio}
    (OUT / "bench_pb.json").write_text(json.dumps(report, indent=2) + "\n")

    m = report["machine"]
    print(f"{args.samples:,} samples, aux features {', '.join(sorted(aux))}; batch_size {BATCH_SIZE}, 1 thread, "
          f"median of {args.runs} runs; {m['nproc']} cores ({m['cpu']}), {report['date']}\n")
    print(markdown_table(["input", "bytes", "samples/s", "MB/s of input"], [
        ["text", f"{sizes['text']:,}", f"{text_read['samples_per_s']:,.0f}", f"{text_read['mb_per_s']:.1f}"],
        ["pb.zst", f"{sizes['pb.zst']:,}", f"{pb_read['samples_per_s']:,.0f}", f"{pb_read['mb_per_s']:.1f}"]]))
    print(f"\npb.zst / text samples/s (median of the per-round ratios): {ratio:.2f}x; "
          f"text / pb size: {sizes['text'] / sizes['pb']:.2f}x (uncompressed pb), "
          f"{sizes['text'] / sizes['pb.zst']:.2f}x (pb.zst)")
    print(f"convert text -> pb.zst, 1 thread: {report['convert_mb_per_s']:.1f} MB/s of text ({convert_s:.2f} s)")
    print(f"JSON: {OUT / 'bench_pb.json'}")


if __name__ == "__main__":
    main()
