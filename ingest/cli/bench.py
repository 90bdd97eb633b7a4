"""``ingest-bench`` (also ``ingest bench``): throughput of a reader over sample files.

Prints samples/s, MB/s, batches/s, p50/p99 batch latency, the seconds of each pipeline stage
(read, parse, ops, batch, unique, and the consumer's wait), peak RSS and, kept apart, the
warm-up (numba compile or cache load).  First a warm-up reader with the same options over the
first input takes one batch, so that the numba kernels are compiled or loaded from the cache; its
batch size is 8 (the
real one with --no-split-group, as a whole group may not fit in 8).  Its time is reported
as ``compile_seconds`` and excluded.  The timed run goes from ``startup()`` to the end of
the last batch; MB/s counts the (decompressed) bytes parsed, per core divides by
``--threads``; latency is the time between successive batches.
"""

import argparse
import contextlib
import json
import os
import resource
import sys
import tempfile
import time

import numpy as np

from .. import synthetic, warmup
from ..discover import scan_features
from ..dsl import load_feature_conf
from ..errors import ConfigError, IngestError
from ..formats import format_of
from ..formats import FileType
from ..reader import DataReader
from ..sources.plan import plan_paths
from ..sources.filesystems import check_writable
from .report import fail, one_line_warnings, progress_bar

__all__ = [
    "add_arguments",
    "build_parser",
    "main",
    "run",
    "warm_up",
    "measure",
    "per_core",
    "json_flag_alone",
    "peak_rss_mb",
    "infer_features",
    "read_feature_file",
]

AUTO_BYTES = 4 << 20
WARM_UP_BATCH_SIZE = 8


# -- feature declarations -------------------------------------------------------------------
def infer_features(paths, file_type):
    """Every feature in the first ``AUTO_BYTES`` of the first input and the label count.

    Returns ``(features, label_count)`` with features as ``(name, type, table, nvec)``.
    """
    first = plan_paths(paths[:1], splittable=False)[:1]
    found = scan_features(first, file_type, limit=AUTO_BYTES)
    features = found.declarations()
    if not features and found.label_count == 0:
        raise ConfigError(
            f"{first[0].url}: no feature or label in the first {AUTO_BYTES >> 20} MiB; "
            f"declare the features with --features FILE"
        )
    return features, found.label_count


def read_feature_file(path):
    """Features listed in a text file, one per line: ``NAME sparse`` or ``NAME dense NVEC``.

    Blank lines and ``#`` comments are ignored.  Returns a list of ``(name, type, table, nvec)``.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--features {path}: cannot read: {exc}") from exc
    features = []
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if len(words) == 2 and words[1] == "sparse":
            features.append((words[0], "sparse", 0, None))
        elif len(words) == 3 and words[1] == "dense" and words[2].isdigit():
            features.append((words[0], "dense", 0, int(words[2])))
        elif words:
            raise ConfigError(f"{path}:{number}: {line.strip()!r}: expected 'NAME sparse' or 'NAME dense NVEC'")
    if not features:
        raise ConfigError(f"--features {path}: no feature declared")
    return features


def _declarer(args, first_input):
    """A function declaring the features and label count chosen by ``args`` on a reader."""
    features = labels = None
    if args.features == "auto" and args.synthetic is not None:
        labels = synthetic.LABEL_COUNT
    else:
        if args.features != "auto":
            features = read_feature_file(args.features)
        if features is None or args.label_count == "auto":
            found, labels = infer_features([first_input], args.format)
            features = features or found
    if args.label_count != "auto":
        labels = args.label_count

    def declare(reader):
        if features is None:
            synthetic.declare(reader)
        else:
            for name, ftype, table, nvec in features:
                reader.feature(name=name, type=ftype, nvec=nvec, table=table)
        return reader.label_count(labels)

    return declare


# -- measuring ------------------------------------------------------------------------------
def warm_up(reader):
    """Start ``reader``, take one batch and shut it down; returns the seconds taken."""
    t0 = time.perf_counter()
    try:
        reader.startup()
        next(reader, None)
    finally:
        reader.shutdown()
    return time.perf_counter() - t0


def measure(reader, progress=None):
    """Read every batch of ``reader`` (not started yet) and time it.

    Returns
    -------
    dict
        ``samples`` (sum of ``batch.size``), ``bytes`` (``stats()["bytes"]``), ``batches``,
        ``seconds`` (from ``startup()`` to the end), ``samples_per_s``, ``mb_per_s``,
        ``batches_per_s``, ``p50_ms`` and ``p99_ms`` of the time between successive batches
        (None with fewer than two batches), ``first_batch_ms`` (from ``startup()``),
        ``cpu_seconds`` (CPU time of the whole process, every thread, over the run: on a
        shared VM it is steadier than wall time, which counts time stolen by neighbours),
        ``samples_per_cpu_s`` and ``stats`` (``reader.stats()``).  ``progress.update(samples)`` is called
        after each batch when given (a ``report.progress_bar``).
    """
    stamps = []
    samples = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    try:
        reader.startup()
        for batch in reader:
            stamps.append(time.perf_counter())
            samples += batch.size
            if progress is not None:
                progress.update(batch.size)
        seconds = time.perf_counter() - t0
        cpu_seconds = time.process_time() - c0
        stats = reader.stats()
    finally:
        reader.shutdown()
    gaps = np.diff(stamps) * 1e3
    p50, p99 = np.percentile(gaps, [50, 99]).tolist() if len(gaps) else (None, None)
    return {
        "samples": samples,
        "bytes": stats["bytes"],
        "batches": len(stamps),
        "seconds": seconds,
        "samples_per_s": samples / seconds,
        "mb_per_s": stats["bytes"] / seconds / 1e6,
        "batches_per_s": len(stamps) / seconds,
        "p50_ms": p50,
        "p99_ms": p99,
        "first_batch_ms": (stamps[0] - t0) * 1e3 if stamps else None,
        "cpu_seconds": cpu_seconds,
        "samples_per_cpu_s": samples / cpu_seconds if cpu_seconds else None,
        "stats": stats,
    }


def per_core(result, threads):
    """``threads`` and the samples/s and MB/s of ``result`` (from ``measure``) divided by it."""
    return {
        "threads": threads,
        "samples_per_s_per_core": result["samples_per_s"] / threads,
        "mb_per_s_per_core": result["mb_per_s"] / threads,
    }


def peak_rss_mb():
    """Peak resident set size of this process so far, in MB (``getrusage``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6  # bytes on macOS, KiB on Linux


def _format_of_name(path):
    try:
        return format_of(path).value
    except ConfigError:  # no telling suffix: text, as XDL's data files
        return FileType.txt.value


def _reader(name, paths, args, declare, dsl):
    reader = DataReader(name, paths=paths, file_type=args.format)
    reader.batch_size(args.batch_size).threads(args.threads).epochs(args.epochs).split_group(args.split_group)
    reader.unique_ids(args.unique_ids)
    declare(reader)
    return reader.features(dsl)


def _dsl_features(path):
    """The features of the ``--dsl`` conf file; a ``ConfigError`` naming it when it cannot be read."""
    try:
        return load_feature_conf(path)
    except IngestError:  # located already (a SourceError is also an OSError)
        raise
    except OSError as exc:
        raise ConfigError(f"--dsl {path}: cannot read: {exc.strerror or exc}") from exc


def _bench(args, paths):
    dsl = () if args.dsl is None else _dsl_features(args.dsl)  # before anything is compiled or read
    parse = "text" if args.format == FileType.txt.value else "pb"
    groups = ([f"scan-{parse}"] if "auto" in (args.features, args.label_count) else []) + [parse, "batch"]
    groups += (["unique"] if args.unique_ids else []) + (["dsl"] if args.dsl else [])
    warmup.notice(groups, parallel=warmup.ahead(warmup.cold(groups)))
    declare = _declarer(args, paths[0])
    # whole groups (--no-split-group) may not fit in a warm-up batch of 8: keep the batch size then
    warm_batch_size = WARM_UP_BATCH_SIZE if args.split_group else args.batch_size
    warm = _reader("ingest-bench-warm-up", paths[:1], args, declare, dsl)
    compile_seconds = warm_up(warm.batch_size(warm_batch_size))
    reader = _reader("ingest-bench", paths, args, declare, dsl)
    if args.timeline is not None:
        reader.timeline(args.timeline)
    bar = progress_bar(unit=" samples", desc="reading", enabled=args.progress)
    try:
        timed = measure(reader, bar)
    finally:
        bar.close()
    stats = timed.pop("stats")
    return {
        **timed,
        **per_core(timed, args.threads),
        "batch_size": args.batch_size,
        "compile_seconds": compile_seconds,
        "peak_rss_mb": peak_rss_mb(),
        "stats": stats,
    }


def format_report(result):
    """The human-readable report of a result of ``ingest-bench``: aligned ``label  value`` lines."""
    r = result

    def ms(value):
        return "-" if value is None else f"{value:,.1f} ms"

    def count(n, noun, plural):
        return f"{n:,} {noun if n == 1 else plural}"

    lines = [
        (
            "samples",
            f"{r['samples']:,} in {count(r['batches'], 'batch', 'batches')} of {r['batch_size']:,}, "
            f"{count(r['threads'], 'thread', 'threads')}",
        ),
        ("bytes", f"{r['bytes']:,} ({r['bytes'] / 1e6:,.1f} MB)"),
        ("seconds", f"{r['seconds']:.3f} (warm-up {r['compile_seconds']:.2f} s, excluded)"),
        (
            "throughput",
            f"{r['samples_per_s']:,.0f} samples/s   {r['mb_per_s']:,.1f} MB/s   {r['batches_per_s']:,.1f} batches/s",
        ),
        ("per core", f"{r['samples_per_s_per_core']:,.0f} samples/s   {r['mb_per_s_per_core']:,.1f} MB/s"),
        ("latency", f"p50 {ms(r['p50_ms'])}   p99 {ms(r['p99_ms'])}   first batch {ms(r['first_batch_ms'])}"),
        ("stages", _stages(r["stats"]["seconds"], r["samples"])),
        ("peak RSS", f"{r['peak_rss_mb']:,.0f} MB"),
    ]
    width = max(len(label) for label, _ in lines)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in lines)


STAGES = ("read", "parse", "ops", "batch", "unique", "wait")


def _stages(seconds, samples):
    """Seconds per pipeline stage (summed over threads) and microseconds per sample."""
    parts = [
        f"{name} {seconds[name]:.2f} s ({seconds[name] / max(samples, 1) * 1e6:.2f} us/sample)"
        for name in STAGES
        if name in seconds
    ]
    return "   ".join(parts) or "-"


def run(args, prog="ingest-bench"):
    """Run the benchmark described by parsed ``args`` and print its report; returns the exit code.

    An ``IngestError`` is printed as one line ``<prog>: <message>`` on stderr (exit code 2).
    """
    try:
        if bool(args.inputs) == (args.synthetic is not None):
            raise ConfigError("expected INPUT files or --synthetic N (one of the two)")
        if args.json not in (None, "-"):
            check_writable(args.json, "--json")
        with contextlib.ExitStack() as stack:
            stack.enter_context(one_line_warnings(prog))
            paths = args.inputs
            if args.synthetic is not None:
                if args.format not in (None, FileType.txt.value):
                    raise ConfigError(
                        f"--synthetic writes text samples, not --format {args.format}; convert them with ingest convert"
                    )
                args.format = FileType.txt.value
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="ingest-bench-"))
                paths = [os.path.join(tmp, "synthetic.txt")]
                synthetic.write(paths[0], args.synthetic, args.seed)
            else:
                args.format = args.format or _format_of_name(paths[0])
            result = _bench(args, paths)
    except IngestError as exc:
        return fail(prog, exc)
    if args.json is None:
        print(format_report(result))
    elif args.json == "-":
        print(json.dumps(result))
    else:
        with open(args.json, "w") as f:
            json.dump(result, f)
    return 0


# -- command line ---------------------------------------------------------------------------
def _int_at_least(minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= {minimum}")
        return value

    return parse


def _auto_or(parse):
    def parse_or_auto(text):
        return "auto" if text == "auto" else parse(text)

    return parse_or_auto


def add_arguments(parser):
    """Add the arguments of ``ingest-bench`` to ``parser`` (also used by ``ingest bench``)."""
    parser.add_argument(
        "inputs", nargs="*", metavar="INPUT", help="sample files, directories, globs or URLs, read in order"
    )
    parser.add_argument(
        "--synthetic",
        type=_int_at_least(1),
        metavar="N",
        help="instead of INPUT, read N synthetic ads samples (ingest.synthetic) written to "
        "a temporary file, deleted at exit",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="seed of --synthetic (default: 0)")
    parser.add_argument(
        "--format",
        choices=[t.value for t in FileType],
        default=None,
        help="sample format (default: from the first input's name, .pb/.spb[.zst...], else txt)",
    )
    parser.add_argument(
        "--batch-size", type=_int_at_least(1), default=1024, metavar="N", help="samples per batch (default: 1024)"
    )
    parser.add_argument(
        "--threads",
        type=_int_at_least(1),
        default=1,
        metavar="N",
        help="parse threads; per-core figures divide by it (default: 1)",
    )
    parser.add_argument(
        "--epochs", type=_int_at_least(1), default=1, metavar="N", help="passes over the input (default: 1)"
    )
    parser.add_argument(
        "--label-count",
        type=_auto_or(_int_at_least(0)),
        default="auto",
        metavar="auto|N",
        help="label columns; auto: as many as the samples of the first 4 MiB have, 2 with --synthetic (default: auto)",
    )
    parser.add_argument(
        "--features",
        default="auto",
        metavar="auto|FILE",
        help="features to declare; auto: every sparse and dense feature in the first 4 MiB "
        "of the first INPUT (dense width from its values, aux tables of pb kept), the "
        "synthetic ones with --synthetic; FILE: one per line, 'NAME sparse' or "
        "'NAME dense NVEC' (default: auto)",
    )
    parser.add_argument(
        "--split-group",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="let a sample group span two batches; --no-split-group keeps groups whole (default: split)",
    )
    parser.add_argument(
        "--unique-ids",
        action="store_true",
        help="compute per-batch unique ids of every sparse feature (reader.unique_ids)",
    )
    parser.add_argument(
        "--dsl",
        metavar="FILE",
        help="DSL features to compute, XDL's conf lines 'Name=..;Type=KV|ID|Numeric;Expr=..' "
        "(ingest.load_feature_conf), declared after --features",
    )
    parser.add_argument(
        "--timeline",
        metavar="FILE",
        help="write a Chrome trace of the timed run (chrome://tracing, Perfetto): a track per "
        "thread, an event per chunk read and parsed, op run and batch built",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress line on stderr (default: when stderr is a terminal)",
    )
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="print one JSON object (samples, bytes, batches, seconds, samples_per_s, "
        "mb_per_s, batches_per_s, p50_ms, p99_ms, threads, batch_size, compile_seconds, "
        "peak_rss_mb, stats, ...) instead of text; --json=FILE writes it to FILE",
    )
    return parser


def json_flag_alone(argv):
    """``argv`` with a bare ``--json`` as ``--json=-``: only ``--json=FILE`` names a file, so that the input
    after a bare ``--json`` stays an input."""
    return ["--json=-" if a == "--json" else a for a in argv]


def build_parser(prog="ingest-bench"):
    """The argument parser of ``ingest-bench``."""
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__.replace("``", ""), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    return add_arguments(parser)


def main(argv=None):
    """Entry point of ``ingest-bench``; returns the exit code."""
    return run(build_parser().parse_args(json_flag_alone(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
