"""Two revisions of ingest against each other: text and pb, 1 and 2 threads, unique ids off and on.

A change to the pipeline moves throughput by less than the VM moves over minutes, so the two
revisions run in alternation: each round starts one subprocess per revision (``git archive`` of its
``ingest/`` and ``native/`` into a temporary tree, imported instead of the installed package), and
each subprocess reads the synthetic samples in every configuration once untimed (numba compiles or
loads its cache), then once timed: text twice over (2 epochs), pb six times over (``--longer k``: k times
that, for an effect smaller than a one-second run's noise).  The two revisions take turns going first.
Prints the medians of samples/s, the ratio new / old by wall time and by CPU time of the whole process (a
co-tenant's load slows a run's wall clock more than its CPU time), the 2-thread to 1-thread ratio and the cost of
unique ids (medians of per-round ratios); writes ``benchmarks/results/bench_ab.json``.

    python benchmarks/bench_ab.py --old main --new exp/cores-pipeline [--rounds 4] [--samples 120000] [--formats pb]
        [--longer 3]

``--formats pb.zst`` reads the pb file compressed by ``ingest convert`` (of the installed ingest, written once
beside it), the same bytes for both revisions.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import markdown_table, revision_tree, save_report, synthetic_inputs

CONFIGS = [(fmt, threads, unique) for fmt in ("txt", "pb", "pb.zst") for unique in (False, True) for threads in (1, 2)]
EPOCHS = {"txt": 2, "pb": 6, "pb.zst": 6}  # runs of about a second on this machine


def child(text, pb, aux, configs, longer):
    """In the subprocess (importing the revision's ingest): samples/s of each of ``configs``, as JSON on
    stdout."""
    from ingest.cli.bench import measure
    from bench_peers import ingest_reader

    inputs = {"txt": (text, set()), "pb": (pb, aux), "pb.zst": (_zst(pb), aux)}

    def reader(fmt, threads, unique, epochs):
        path, aux_of = inputs[fmt]
        return ingest_reader(path, fmt.split(".")[0], aux_of, threads, unique, epochs)

    for config in configs:
        measure(reader(*config, 1))
    timed = [measure(reader(*c, EPOCHS[c[0]] * longer)) for c in configs]
    print(json.dumps([[m["samples_per_s"], m["samples_per_cpu_s"]] for m in timed]))


def _zst(pb):
    """The pb.zst file beside ``pb``: written by the installed ingest (both revisions read the same bytes)."""
    return Path(f"{pb}.zst")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", help="git revision compared against (required)")
    parser.add_argument("--new", help="git revision measured (required)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--samples", type=int, default=120_000)
    parser.add_argument("--formats", default="txt,pb", help="the formats measured (default: txt,pb)")
    parser.add_argument("--longer", type=int, default=1, help="timed runs this many times longer (default: 1)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    formats = args.formats.split(",")
    if not formats or set(formats) - set(EPOCHS):
        parser.error(f"--formats {args.formats}: expected some of {','.join(EPOCHS)}")
    configs = [c for c in CONFIGS if c[0] in formats]
    if args.child:
        text, pb, aux = args.child
        child(text, pb, set(aux.split(",")), configs, args.longer)
        return
    if not (args.old and args.new):
        parser.error("--old and --new are required")

    inputs = synthetic_inputs(args.samples)
    text, pb, aux = inputs["text"][0], inputs["pb"][0], inputs["pb"][2]
    if "pb.zst" in formats and not _zst(pb).exists():
        from ingest.convert import convert  # the installed ingest's, in the parent only

        partial = _zst(pb).with_name("partial-" + _zst(pb).name)  # its extension names the format
        convert([str(text)], str(partial), aux=sorted(aux), log=lambda *_: None)
        os.replace(partial, _zst(pb))
    results = {"old": [], "new": []}  # per round, samples/s of each config
    per_cpu = {"old": [], "new": []}  # per round, samples per CPU second of the whole process
    with tempfile.TemporaryDirectory() as tmp:
        trees = {
            side: revision_tree(rev, Path(tmp, side).resolve()) for side, rev in (("old", args.old), ("new", args.new))
        }
        for round_ in range(args.rounds):
            for side, where in sorted(trees.items(), reverse=round_ % 2 == 1):  # who goes first takes turns
                run = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        str(text),
                        str(pb),
                        ",".join(aux),
                        "--formats",
                        args.formats,
                        "--longer",
                        str(args.longer),
                    ],
                    env={**os.environ, "PYTHONPATH": f"{where}{os.pathsep}{Path(__file__).parent}"},
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                )
                if run.returncode:
                    raise SystemExit(f"{side} ({getattr(args, side)}) failed:\n{run.stderr[-3000:]}")
                measured = json.loads(run.stdout.splitlines()[-1])
                results[side].append({c: m[0] for c, m in zip(configs, measured)})
                per_cpu[side].append({c: m[1] for c, m in zip(configs, measured)})

    def median(side, f):
        return statistics.median(f(r) for r in results[side])

    rows = []
    for fmt, threads, unique in configs:
        c = (fmt, threads, unique)
        rows.append(
            [fmt, threads, "on" if unique else "off"]
            + [f"{median(side, lambda r: r[c]):,.0f}" for side in ("old", "new")]
            + [
                f"{statistics.median(n[c] / o[c] for o, n in zip(by['old'], by['new'])):.2f}x"
                for by in (results, per_cpu)
            ]
        )
    header = ["format", "threads", "unique ids", f"old ({args.old})", f"new ({args.new})", "new / old"]
    print(markdown_table(header + ["new / old, per CPU second"], rows))
    summary = []
    for fmt in formats:
        for side in ("old", "new"):
            scaling = [median(side, lambda r: r[(fmt, 2, u)] / r[(fmt, 1, u)]) for u in (False, True)]
            cost = [median(side, lambda r: 1 - r[(fmt, t, True)] / r[(fmt, t, False)]) for t in (1, 2)]
            summary.append([fmt, side, f"{scaling[0]:.2f}x", f"{scaling[1]:.2f}x", f"{cost[0]:.0%}", f"{cost[1]:.0%}"])
    print()
    print(
        markdown_table(
            ["format", "revision", "2t / 1t", "2t / 1t, unique", "unique cost 1t", "unique cost 2t"], summary
        )
    )
    save_report(
        "bench_ab",
        old=args.old,
        new=args.new,
        longer=args.longer,
        configs=configs,
        samples_per_s={side: [[r[c] for c in configs] for r in runs] for side, runs in results.items()},
        samples_per_cpu_s={side: [[r[c] for c in configs] for r in runs] for side, runs in per_cpu.items()},
    )


if __name__ == "__main__":
    main()
