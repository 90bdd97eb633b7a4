"""``ingest trace show`` and ``ingest trace to-parquet``: trace files read back (docs/trace.md)."""

import argparse
import datetime
import json

import numpy as np

from ..errors import ConfigError, IngestError
from ..trace import read
from ..trace.parquet import to_parquet
from .report import fail

__all__ = ["add_trace"]


def _ids(data, offsets, limit):
    """The first ``limit`` ids of a Byte array cut at ``offsets``, as text."""
    n = len(offsets) - 1
    shown = [bytes(data[offsets[i] : offsets[i + 1]]).decode("utf-8", "replace") for i in range(min(n, limit))]
    return json.dumps(shown)[:-1] + (", ...]" if n > limit else "]")


def _show_record(keys, lstep, gstep, timestamp, values, wanted, limit):
    when = datetime.datetime.fromtimestamp(timestamp / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")
    print(f"lstep {lstep}  gstep {gstep}  {when}")
    width = max(len(k) for k in keys)
    for key in keys:
        if wanted and key not in wanted:
            continue
        a = values[key]
        kind = "bytes" if a.dtype == np.uint8 else str(a.dtype)
        offsets = values.get(f"{key}.offsets")
        if a.dtype == np.uint8 and a.ndim == 1 and offsets is not None and offsets.dtype == np.int64 and len(offsets):
            text = f"{len(offsets) - 1} ids {_ids(a, offsets, limit)}"
        else:
            text = np.array2string(a, threshold=limit, edgeitems=3, max_line_width=100).replace("\n", "\n" + " " * 4)
        print(f"  {key:<{width}}  {kind} {list(a.shape)}  {text}")


def _run_show(args):
    wanted = set(args.key or ())
    shown = 0
    try:
        for keys, lstep, gstep, timestamp, values in read(args.files):
            missing = sorted(wanted - set(keys))
            if missing:
                raise ConfigError(f"no key {missing[0]!r} in the trace; its keys: {list(keys)}")
            if args.step is not None and gstep != args.step:
                continue
            _show_record(keys, lstep, gstep, timestamp, values, wanted, args.n)
            shown += 1
    except IngestError as exc:
        return fail("ingest trace show", exc)
    except BrokenPipeError:  # | head
        return 0
    if args.step is not None and not shown:
        return fail("ingest trace show", IngestError(f"no record of gstep {args.step} in {' '.join(args.files)}"))
    return 0


def _run_to_parquet(args):
    try:
        summary = to_parquet(args.files, args.output)
    except IngestError as exc:
        return fail("ingest trace to-parquet", exc)
    print(f"{summary['records']:,} records, keys {', '.join(summary['keys'])} -> {args.output}")
    return 0


def add_trace(commands):
    p = commands.add_parser(
        "trace",
        help="read trace files back (show, to-parquet)",
        description="Trace files (XDL's format, written by ingest.trace.TraceWriter and reader.trace()) read back.",
    )
    sub = p.add_subparsers(dest="trace_command", metavar="COMMAND", required=True)
    show = sub.add_parser(
        "show",
        help="print the records of trace files",
        description="Print each record (steps, time, every key's dtype, shape and values) of the trace files, in "
        "file and index order.",
    )
    show.add_argument("files", nargs="+", metavar="FILES", help="trace files, globs, folders or URLs")
    show.add_argument("--step", type=int, metavar="N", help="only the records of global step N")
    show.add_argument("--key", action="append", metavar="K", help="only key K (repeat for more)")
    show.add_argument("-n", type=int, default=10, metavar="N", help="values (or ids) shown per array (default: 10)")
    show.set_defaults(run=_run_show)
    parquet = sub.add_parser(
        "to-parquet",
        help="write trace files as one Parquet table",
        description="Write the records of trace files as one Parquet table: a row per record, columns lstep, "
        "gstep, timestamp and one per key (nested lists; sample ids as lists of binary ids), for pandas, DuckDB "
        "or Spark.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parquet.add_argument("files", nargs="+", metavar="FILES", help="trace files, globs, folders or URLs")
    parquet.add_argument("output", metavar="OUT", help="the Parquet file to write (any fsspec URL)")
    parquet.set_defaults(run=_run_to_parquet)
