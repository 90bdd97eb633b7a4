"""``ingest convert``, ``ingest inspect`` and ``ingest produce`` (docs/formats.md, command line)."""

import argparse
import json
import sys

from ..convert import RANGE_MB, SAMPLE_MB, convert
from ..errors import IngestError
from ..inspect import inspect
from ..produce import produce
from .report import fail, one_line_warnings, progress_bar

__all__ = ["add_convert", "add_inspect", "add_produce"]

CONVERT_HELP = """Convert sample files between txt, pb, spb and Parquet.

text -> pb stores the features named by --aux (or, with --aux auto, those identical across
the samples of every multi-sample group in the first 4 MiB of the first input) once per
group in table 1; the choice is printed.  pb/spb -> text expands aux lines back, group ids
become group numbers.  --to parquet writes one row per sample (sample_id, labels, timestamp,
<f>.ids and <f>.values as lists, dense features as fixed-size lists; zstd, row groups of
65,536 samples; sample groups are not kept); --from parquet reads such files, also from other tools (list or large_list
columns, float64 cast, <f>.values optional).  Formats come from the extensions (.txt, .pb,
.spb, plus .gz/.zst; .parquet) unless given.  OUTPUT is one file, or a directory that
receives one file per input (compressed with --compression) and a _manifest.json listing them
in input order; reading the directory follows it.

With --scheduler, a Dask cluster's workers write a directory: uncompressed text inputs larger
than --range-mb are cut at group boundaries into ranges of that size, one task and one part
each (name.00000.pb...); features come from the first --sample-mb of each input, and a task
that meets another feature fails, naming it.
"""


def _log(msg):
    print(msg, file=sys.stderr)


def _run_convert(args):
    aux = None
    if args.aux:
        aux = "auto" if args.aux == "auto" else [a for a in args.aux.split(",") if a]
    try:
        with one_line_warnings("ingest convert"), progress_bar(desc="converting") as bar:
            summary = convert(
                args.inputs,
                args.output,
                src=args.src,
                dst=args.dst,
                aux=aux,
                threads=args.threads,
                client=args.scheduler,
                range_mb=args.range_mb,
                sample_mb=args.sample_mb,
                compression=args.compression,
                log=_log,
                progress=bar,
            )
    except IngestError as exc:
        return fail("ingest convert", exc)
    if args.json:
        print(json.dumps(summary))
    else:
        for out in summary["outputs"]:
            print(out)
    return 0


def add_convert(commands):
    p = commands.add_parser(
        "convert",
        help="convert sample files between txt, pb, spb and Parquet",
        description=CONVERT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="sample files, directories, globs or URLs")
    p.add_argument("output", metavar="OUTPUT", help="output file, or directory (one file per input)")
    formats = ["txt", "pb", "spb", "parquet"]
    p.add_argument("--from", dest="src", choices=formats, help="input format (default: by extension)")
    p.add_argument("--to", dest="dst", choices=formats, help="output format (default: by extension)")
    p.add_argument(
        "--aux", metavar="auto|NAME,...", help="text -> pb: features stored once per group (table 1); auto picks them"
    )
    p.add_argument("--threads", type=int, default=None, metavar="N", help="threads (default: CPU count)")
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="Dask scheduler address: output files are written by its workers (pip install distributed)",
    )
    p.add_argument(
        "--range-mb",
        type=float,
        default=RANGE_MB,
        metavar="MB",
        help=f"with --scheduler: byte ranges of large text inputs, one task each (default: {RANGE_MB})",
    )
    p.add_argument(
        "--sample-mb",
        type=float,
        default=SAMPLE_MB,
        metavar="MB",
        help=f"with --scheduler: leading MB of each input the features are found from (default: {SAMPLE_MB})",
    )
    p.add_argument(
        "--compression",
        choices=["zstd", "gzip", "lz4"],
        help="codec of the files of a directory output (a file output's comes from its name)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(run=_run_convert)


def _run_inspect(args):
    try:
        with one_line_warnings("ingest inspect"), progress_bar(desc="reading") as bar:
            info = inspect(args.file, args.n, args.format, progress=bar)
    except IngestError as exc:
        return fail("ingest inspect", exc)
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"{info['path']}: {info['format']}, {info['files']} file(s), {info['bytes']:,} bytes")
    print(f"samples {info['samples']:,} in {info['groups']:,} groups, {info['label_count']} labels")
    for k, feats in enumerate(info["tables"]):
        desc = ", ".join(f"{f['name']} ({f['type']}" + (f" {f['nvec']})" if "nvec" in f else ")") for f in feats)
        print(f"table {k}: {desc or '(no features)'}")
    for s in info["first"]:
        print(json.dumps(s))
    return 0


def add_inspect(commands):
    p = commands.add_parser(
        "inspect",
        help="tables, features, counts and first samples of a sample file",
        description="Tables, features, counts and the first N samples of any sample file.",
    )
    p.add_argument("file", metavar="FILE", help="a sample file, directory, glob or URL")
    p.add_argument("-n", type=int, default=3, metavar="N", help="samples to show (default: 3)")
    p.add_argument("--format", choices=["txt", "pb", "spb"], help="format (default: by extension)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=_run_inspect)


def _run_produce(args):
    try:
        with progress_bar(desc="sending") as bar:
            summary = produce(args.inputs, args.topic, args.format, args.message_bytes, log=_log, progress=bar)
    except IngestError as exc:
        return fail("ingest produce", exc)
    print(
        json.dumps(summary)
        if args.json
        else f"{summary['messages']:,} messages, {summary['bytes']:,} bytes to partitions {summary['partitions']}"
    )
    return 0


def add_produce(commands):
    p = commands.add_parser(
        "produce",
        help="write sample files to a Kafka topic",
        description="Write sample files to a Kafka topic: whole sample groups (text) or whole "
        "records (pb, spb) per message, round-robin over the partitions.",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="uncompressed sample files, directories, globs or URLs")
    p.add_argument("topic", metavar="kafka://BROKER[,BROKER]/TOPIC[:P,...]", help="the topic (and partitions)")
    p.add_argument("--format", choices=["txt", "pb", "spb"], help="input format (default: by extension)")
    p.add_argument(
        "--message-bytes",
        type=int,
        default=1 << 20,
        metavar="N",
        help="about this many bytes per message (default: 1 MiB)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(run=_run_produce)
