"""Benchmark of per-batch unique ids: what ``unique_ids(True)`` costs the reader, text and pb, 1 and 2 threads.

The readers of ``bench_peers.py`` (every synthetic feature, ``batch_size(1024)``; pb converted with
``--aux auto``, the user features in table 1; text read 3 times over a run, pb 8 times, about a second, as in
``bench_dsl.py``), each read without and with unique ids.  Off and on
alternate run by run (``bench_peers.py`` measures them minutes apart, and the VM's speed moves more
than the cost over minutes): one warm-up run each, then ``--runs`` rounds; the cost is 1 minus the
median of the per-round ratios on/off, by wall time and by CPU time of the whole process.  A reader computes a
batch's unique rows (and their offsets) only when its consumer first reads them: "on" takes nothing of a batch but
its size, "rows read" reads every sparse feature's ``unique_rows`` (making the batch's features, as a trainer that
uses them does), in the same rounds.  Writes ``benchmarks/results/bench_unique.json``.

    python benchmarks/bench_unique.py [--samples 120000] [--runs 5]
"""

from ingest.cli.bench import measure

from _common import alternated_runs, arguments, cost_table, measured_on, report_path, save_report, synthetic_inputs
from bench_peers import BATCH_SIZE, EPOCHS, THREADS, ingest_reader


class RowsRead:
    """A reader whose consumer reads the unique rows of every sparse feature of every batch."""

    def __init__(self, reader):
        self.reader = reader

    def startup(self):
        self.reader.startup()
        return self

    def __iter__(self):
        for batch in self.reader:
            for name in batch.sparse_names:
                batch[name].unique_rows
            yield batch

    def stats(self):
        return self.reader.stats()

    def shutdown(self):
        self.reader.shutdown()


def main(argv=None):
    args = arguments(__doc__).parse_args(argv)
    inputs = synthetic_inputs(args.samples)
    aux = inputs["pb"][2]
    results = {}
    for name, (path, file_type, aux_of) in inputs.items():
        for threads in THREADS:
            results[f"{name} {threads}"] = alternated_runs(
                {
                    "off": lambda p=path, f=file_type, a=aux_of, t=threads: ingest_reader(p, f, a, t, False, EPOCHS[f]),
                    "on": lambda p=path, f=file_type, a=aux_of, t=threads: ingest_reader(p, f, a, t, True, EPOCHS[f]),
                    "rows read": lambda p=path, f=file_type, a=aux_of, t=threads: measure(
                        RowsRead(ingest_reader(p, f, a, t, True, EPOCHS[f]))
                    ),
                },
                args.samples * EPOCHS[file_type],
                args.runs,
            )
    report = save_report(
        "bench_unique", samples=args.samples, runs=args.runs, epochs=EPOCHS, aux=sorted(aux), read=results
    )
    print(
        f"{args.samples:,} samples (read {EPOCHS['txt']} times over in text, {EPOCHS['pb']} in pb), "
        f"batch_size {BATCH_SIZE}, median of {args.runs} alternated rounds; {measured_on(report)}\n"
    )
    print(cost_table(results, "samples/s on"))
    print("\nThe consumer reading every feature's unique rows:\n")
    print(
        cost_table({key: {"off": r["off"], "on": r["rows read"]} for key, r in results.items()}, "samples/s rows read")
    )
    print(f"JSON: {report_path('bench_unique')}")


if __name__ == "__main__":
    main()
