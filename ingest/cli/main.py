"""``ingest``: the command line of ``ingest``, one subcommand per tool (docs/formats.md, command line)."""

import argparse
import functools
import sys

from .. import __version__
from . import bench, tools, trace

__all__ = ["build_parser", "main"]


def build_parser():
    """The argument parser of ``ingest`` and its subcommands."""
    parser = argparse.ArgumentParser(prog="ingest", description=__doc__.replace("``", ""))
    parser.add_argument("--version", action="version", version=f"ingest {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    bench_parser = commands.add_parser(
        "bench",
        help="throughput of a reader over sample files (same as ingest-bench)",
        description=bench.__doc__.replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_arguments(bench_parser)
    bench_parser.set_defaults(run=functools.partial(bench.run, prog="ingest bench"))
    tools.add_convert(commands)
    tools.add_inspect(commands)
    tools.add_produce(commands)
    trace.add_trace(commands)
    return parser


def main(argv=None):
    """Entry point of ``ingest``; returns the exit code of the subcommand."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        argv = bench.json_flag_alone(argv)
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
