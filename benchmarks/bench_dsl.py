"""Benchmark of the feature DSL: what four crosses cost the reader, text and pb.

On the synthetic ads samples, every feature declared, one parse thread, ``batch_size(1024)``:
the same file read without and with four DSL features (issue 4's bar: two ``cartesian``, one
``match``, one aggregation over an aux-table feature):

    ad_x_gender = cartesian(cate, gender)
    ad_x_age    = cartesian(brand, age)
    cate_match  = match(cate, cate_pref)
    clk_logsum  = logsum(clk_hist)          # clk_hist is in aux table 1 in the pb file

The pb file is the text converted with ``--aux auto`` (the user features in table 1), so the
aggregation runs once per aux line; in the text file every feature is in table 0.  A run reads the
file several times over (``EPOCHS`` of ``bench_peers.py``: 3 for text, 8 for pb), so that it lasts about a
second.  One warm-up run each, then ``--runs`` rounds alternating plain and DSL readers; medians, and the
median of the per-round ratios.  Writes ``benchmarks/results/bench_dsl.json``.

    python benchmarks/bench_dsl.py [--samples 120000] [--runs 5]
"""

from _common import alternated_runs, arguments, markdown_table, measured_on, report_path, save_report, synthetic_inputs
from bench_pb import reader_for
from bench_peers import EPOCHS

CROSSES = {
    "ad_x_gender": "cartesian(cate, gender)",
    "ad_x_age": "cartesian(brand, age)",
    "cate_match": "match(cate, cate_pref)",
    "clk_logsum": "logsum(clk_hist)",
}


def with_crosses(reader):
    for name, expr in CROSSES.items():
        reader.feature(name=name, type="sparse", dsl=expr)
    return reader


def main(argv=None):
    args = arguments(__doc__).parse_args(argv)

    inputs = synthetic_inputs(args.samples)
    aux = inputs["pb"][2]
    results = {}
    for name, spec in inputs.items():
        epochs = EPOCHS[spec[1]]
        results[name] = alternated_runs(
            {
                "plain": lambda s=spec, e=epochs: reader_for(*s).epochs(e),
                "dsl": lambda s=spec, e=epochs: with_crosses(reader_for(*s)).epochs(e),
            },
            args.samples * epochs,
            args.runs,
        )
    report = save_report(
        "bench_dsl", samples=args.samples, runs=args.runs, epochs=EPOCHS, crosses=CROSSES, aux=sorted(aux), read=results
    )
    print(
        f"{args.samples:,} samples (read {EPOCHS['txt']} times over in text, {EPOCHS['pb']} in pb), 1 parse thread, "
        f"batch_size 1024, median of {args.runs} rounds; "
        f"{measured_on(report)}\n"
    )
    rows = []
    for name, r in results.items():
        plain, dsl = r["plain"], r["dsl"]
        rows.append(
            [
                name,
                f"{plain['samples_per_s']:,.0f}",
                f"{dsl['samples_per_s']:,.0f}",
                f"{1 - dsl['ratio']:.1%}",
                f"{1 - dsl['cpu_ratio']:.1%}",
            ]
        )
    print(markdown_table(["input", "samples/s without", "samples/s with 4 crosses", "cost (wall)", "cost (CPU)"], rows))
    print(f"JSON: {report_path('bench_dsl')}")


if __name__ == "__main__":
    main()
