"""Benchmark of the trainer adapters against the raw reader: what a training loop gets, in samples/s.

On the synthetic pb file (``--aux auto``: user features in table 1), batch_size 1024, every feature declared:
the raw reader on 2 threads; ``ingest.torch.ReaderDataset`` through a ``DataLoader`` with 0 workers (the reader
on 2 threads in the main process), 1 worker (2 threads) and 2 workers (1 thread each: the same two cores), with
``prefetch_factor=8`` as the README's loop has it, and the 2 workers with torch's default of 2;
``ingest.tf.dataset`` over the reader on 2 threads; the raw reader with ``shuffle(0, buffer=10000)`` (a shuffle
of sample groups in windows of 10,000).  The control: the 2-worker loader with a transform that returns only
the batch's size, so that no array crosses to the main process: the most any transport of batches can reach
through a ``DataLoader`` here.  Each reads the file ``EPOCHS`` times, timed from its first batch to its last
(the steady state: starting worker processes is a cost of its own, paid once per loader).  One warm-up each,
then ``--runs`` rounds running them back to back; medians, and the median of the per-round ratios to the raw
reader.  Then ``batch.to_kjt()`` (table 0), and ``to_kjt()`` with ``to_kjt(table=1)`` (the aux table): the cost
to the raw 2-thread reader within one run of ``--seconds`` each, made on every other 100 batches
(``_common.interleaved_blocks``).  Targets: the 2-worker loader
at least 0.8x the raw reader, ``to_kjt`` costing under 10 %.  CPU seconds are the main process's (a loader's
workers are processes of their own): per batch, what the consumer's side costs.  Writes
``benchmarks/results/bench_trainers.json``.

    python benchmarks/bench_trainers.py [--samples 120000] [--runs 3] [--seconds 20]
"""

import time

import ingest
import ingest.torch
from ingest import synthetic

from _common import (
    alternated_runs,
    arguments,
    cost_table,
    interleaved_blocks,
    markdown_table,
    measured_on,
    save_report,
    synthetic_inputs,
)

BATCH_SIZE = 1024
EPOCHS = 40
SHUFFLE_BUFFER = 10_000
PREFETCH = 8  # the loaders' prefetch_factor, as the README's loop has it


def reader(path, aux, threads, epochs=EPOCHS):
    r = ingest.DataReader("trainers", paths=[str(path)], file_type="pb").batch_size(BATCH_SIZE).epochs(epochs)
    return synthetic.declare(r.threads(threads), aux=aux, serialized=True)


def timed(items, size_of):
    """Consume ``items`` and time it from the first one, in the shape ``alternated_runs`` takes."""
    items = iter(items)
    samples = size_of(next(items))
    c0, t0 = time.process_time(), time.perf_counter()
    samples += sum(size_of(item) for item in items)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "samples": samples,
        "seconds": seconds,
        "samples_per_s": samples / seconds,
        "mb_per_s": 0.0,
        "cpu_seconds": cpu,
        "samples_per_cpu_s": samples / cpu if cpu else 0.0,
    }


def size_only(batch):
    """The loader's own ceiling: what it delivers when no array crosses from its workers."""
    return {"size": batch.size}


def loader(path, aux, workers, transform=ingest.torch.batch_tensors, prefetch=PREFETCH):
    import torch

    threads = 2 if workers < 2 else 1
    data = torch.utils.data.DataLoader(
        ingest.torch.ReaderDataset(reader(path, aux, threads), transform=transform),
        batch_size=None,
        num_workers=workers,
        prefetch_factor=prefetch if workers else None,
    )
    return timed(data, lambda item: item["size"])


def raw(path, aux):
    with reader(path, aux, 2) as r:
        return timed(r.startup(), len)


def shuffled(path, aux):
    with reader(path, aux, 2).shuffle(0, buffer=SHUFFLE_BUFFER) as r:
        return timed(r.startup(), len)


KJTS = {  # what a TorchRec trainer builds of a batch
    "to_kjt()": lambda batch: batch.to_kjt(),
    "to_kjt() and to_kjt(table=1)": lambda batch: (batch.to_kjt(), batch.to_kjt(table=1)),
}


def tf_dataset(path, aux):
    import ingest.tf

    return timed(ingest.tf.dataset(reader(path, aux, 2)), lambda el: int(el["size"]))


def main(argv=None):
    parser = arguments(__doc__, runs=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="of each to_kjt() run (default: 20)")
    args = parser.parse_args(argv)
    path, _, aux = synthetic_inputs(args.samples)["pb"]
    makers = {
        "raw reader, 2 threads": lambda: raw(path, aux),
        "DataLoader, 0 workers": lambda: loader(path, aux, 0),
        "DataLoader, 1 worker": lambda: loader(path, aux, 1),
        "DataLoader, 2 workers": lambda: loader(path, aux, 2),
        "DataLoader, 2 workers, torch's default prefetch_factor=2": lambda: loader(path, aux, 2, prefetch=2),
        "DataLoader, 2 workers, sizes only (control)": lambda: loader(path, aux, 2, size_only),
        "ingest.tf.dataset": lambda: tf_dataset(path, aux),
        f"reader + shuffle(buffer={SHUFFLE_BUFFER:,})": lambda: shuffled(path, aux),
    }
    # first: torchrec loads triton, which segfaults when it is loaded after tensorflow in one process
    kjt = {name: interleaved_blocks(reader(path, aux, 2, epochs=0), make, args.seconds) for name, make in KJTS.items()}
    results = alternated_runs(makers, EPOCHS * args.samples, args.runs)
    report = save_report(
        "bench_trainers",
        samples=args.samples,
        epochs=EPOCHS,
        batch_size=BATCH_SIZE,
        runs=args.runs,
        results=results,
        to_kjt={"seconds": args.seconds, **kjt},
    )
    print(
        f"{args.samples:,} samples x {EPOCHS} epochs, pb with aux tables, batch_size {BATCH_SIZE}, median of "
        f"{args.runs} rounds; {measured_on(report)}\n"
    )
    print(
        markdown_table(
            ["consumer", "samples/s", "vs raw reader", "samples/CPU-s", "main process CPU per batch"],
            [
                [
                    name,
                    f"{r['samples_per_s']:,.0f}",
                    f"{r['ratio']:.2f}x",
                    f"{r['samples_per_cpu_s']:,.0f}",
                    f"{1000 * BATCH_SIZE / r['samples_per_cpu_s']:.2f} ms" if r["samples_per_cpu_s"] else "-",
                ]
                for name, r in results.items()
            ],
        )
    )
    print(f"\nTorchRec's inputs, raw reader on 2 threads, made on every other 100 batches for {args.seconds:g} s:\n")
    print(cost_table({f"{name} 2": r for name, r in kjt.items()}, "samples/s with it"))


if __name__ == "__main__":
    main()
