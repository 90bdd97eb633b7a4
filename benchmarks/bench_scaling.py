"""How ingest scales from 1 thread to 2, and from 1 core to 2: text, pb and pb.zst, unique ids off and on.

A ``threads(1)`` reader's consumer (and, where batches follow one block stream, its batcher and
unique-id threads) can use part of a second core, so its throughput need not be what one core
delivers.  This benchmark reads the synthetic samples of ``bench_peers.py`` (every feature, ``batch_size(1024)``
unless ``--batch-size`` says otherwise, text read 3 times over a run, pb and pb.zst 8 times) five ways, alternated
run by run:

- ``1 thread``: ``threads(1)``, the process free to use every core (the bar's "1 thread");
- ``1 core``: ``threads(1)`` with every thread of the reader pinned to one core (``sched_setaffinity``
  before ``startup()``: the pipeline's threads inherit it);
- ``2 threads``: ``threads(2)`` on every core;
- ``2 processes``: two processes, each a ``threads(1)`` reader of one shard (``shard(i, 2)``), started
  together: two cores that share nothing of Python (no GIL, no object, no allocator), only the
  machine's caches and memory bandwidth (their numpy asks for no huge pages: ``_HUGE_PAGE_ADVICE``).  The gap
  from ``2 threads`` to them is what running in one process costs; the gap from them to twice ``1 core`` is the
  machine's.  The pb.zst file's shards are runs of its
  frames of 8 MiB, uneven here (55 % and 45 % of the samples), so for it each process reads the whole file half as
  many times instead;
- ``2 readers``: the same two readers in two threads of this process, started together: the gap from them to
  ``2 processes`` is what sharing one interpreter (its GIL) costs, the gap from ``2 threads`` to them what
  ``threads(2)``'s own pipeline costs beyond it.

``--batch-size`` (default 1024) sets every reader's batch size: what a batch costs in Python, under the GIL that the
parse threads share, weighs per sample in inverse proportion to it. One warm-up run each, then ``--runs`` rounds.
Reports medians of samples/s, the cores kept busy (CPU seconds over wall seconds), the times a batch the
process's threads went to sleep (voluntary context switches, ``getrusage``: waiting for the GIL, a queue or a read;
each costs a wake-up, dear on a VM), the ratios of ``2 threads`` to the other four ways (``alternated_runs``' medians
of per-round ratios to ``2 threads``, turned over), and that of ``2 readers`` to ``2 processes`` (of their medians).
Writes
``benchmarks/results/bench_scaling.json`` (``bench_scaling_batch<n>.json`` for another batch size). Linux only.

    python benchmarks/bench_scaling.py [--samples 120000] [--runs 5] [--batch-size 1024]
"""

import multiprocessing
import os
import resource
import threading
import time
from unittest import mock

from _common import (
    alternated_runs,
    arguments,
    converted,
    markdown_table,
    measured_on,
    report_path,
    save_report,
    synthetic_inputs,
)
from bench_peers import BATCH_SIZE, EPOCHS, ingest_reader
from ingest.cli.bench import measure

# name: threads, and the cores the reader's threads may run on; "2 threads" first, the ratios' base
WAYS = {"2 threads": (2, None), "1 thread": (1, None), "1 core": (1, 1)}
ALL_WAYS = (*WAYS, "2 readers")  # and "2 processes", the control, always


def main(argv=None):
    parser = arguments(__doc__)
    parser.add_argument(
        "--batch-size", type=int, default=BATCH_SIZE, help=f"every reader's batch size (default: {BATCH_SIZE})"
    )
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs at least 2 cores")
    inputs = synthetic_inputs(args.samples)
    inputs["pb.zst"] = (converted(inputs["text"][0], ".pb.zst"), "pb", inputs["pb"][2])
    results = {}
    for name, (path, file_type, aux) in inputs.items():
        for unique in (False, True):
            results[f"{name} {'on' if unique else 'off'}"] = scaling_runs(
                path, file_type, aux, unique, args.samples, args.runs, args.batch_size, shards=name != "pb.zst"
            )
    name = "bench_scaling" if args.batch_size == BATCH_SIZE else f"bench_scaling_batch{args.batch_size}"
    report = save_report(
        name, samples=args.samples, runs=args.runs, epochs=EPOCHS, batch_size=args.batch_size, read=results
    )
    print(
        f"{args.samples:,} samples (read {EPOCHS['txt']} times over in text, {EPOCHS['pb']} in pb and pb.zst), "
        f"batch_size {args.batch_size}, median of {args.runs} alternated rounds; {measured_on(report)}\n"
    )
    ways = ["1 thread", "1 core", "2 threads", "2 readers", "2 processes"]
    bases = ["1 thread", "1 core", "2 readers", "2 processes"]
    rows = []
    for key, r in results.items():  # ratios of the others to 2 threads, turned over
        rows.append(
            key.split()
            + [
                f"{r[way]['samples_per_s']:,.0f} ({r[way]['cores']:.2f}; {r[way]['sleeps_per_batch']:.1f})"
                for way in ways
            ]
            + [f"{1 / r[base]['ratio']:.2f}x" for base in bases]
            + [f"{r['2 readers']['samples_per_s'] / r['2 processes']['samples_per_s']:.2f}x"]
        )
    print(
        markdown_table(
            ["input", "unique ids"]
            + [f"{way}: samples/s (cores; sleeps a batch)" for way in ways]
            + [f"2 threads / {base}" for base in bases]
            + ["2 readers / 2 processes"],
            rows,
        )
    )
    print(f"JSON: {report_path(name)}")


def scaling_runs(path, file_type, aux, unique, samples, runs, batch_size=BATCH_SIZE, shards=True, ways=ALL_WAYS):
    """``alternated_runs`` of the readers of ``path`` (``samples`` read ``EPOCHS[file_type]`` times over a run), the
    ways of ``ways`` ("2 threads" first, the ratios' base), then "2 processes" (``TwoProcesses``, of ``shards``)."""
    allowed = os.sched_getaffinity(0)

    def maker(threads, cores):
        def make():
            # the reader's threads start in startup() and inherit this thread's affinity
            os.sched_setaffinity(0, set(sorted(allowed)[:cores]) if cores else allowed)
            return with_sleeps(ingest_reader(path, file_type, aux, threads, unique, EPOCHS[file_type], batch_size))

        return make

    makers = {way: maker(*WAYS[way]) for way in ways if way in WAYS}
    if "2 readers" in ways:
        makers["2 readers"] = two_readers(path, file_type, aux, unique, batch_size, shards, allowed)
    try:
        with TwoProcesses(path, file_type, aux, unique, batch_size, shards) as two:
            makers["2 processes"] = two.run
            return alternated_runs(makers, samples * EPOCHS[file_type], runs)
    finally:
        os.sched_setaffinity(0, allowed)  # a "1 core" run pins this thread


def with_sleeps(reader):
    """``measure`` of ``reader``, with ``sleeps``: the times every thread of the process went to sleep meanwhile."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    result = measure(reader)
    result["sleeps"] = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before
    return result


def two_readers(path, file_type, aux, unique, batch_size, shards, cores):
    """``run`` of "2 readers": the two readers of ``TwoProcesses`` (``shard_reader``) in two threads of this process,
    on ``cores``, started together; returned as one run, as ``TwoProcesses.run`` does."""

    def run():
        os.sched_setaffinity(0, cores)  # a "1 core" run may have pinned this thread; the readers' threads inherit it
        runs = [None, None]

        def read(index):
            runs[index] = measure(shard_reader(path, file_type, aux, unique, batch_size, index if shards else None))

        threads = [threading.Thread(target=read, args=(index,)) for index in range(2)]
        sleeps = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        cpu = time.process_time()
        t0 = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - t0
        if None in runs:
            raise SystemExit("2 readers: a reader failed (above)")
        sleeps = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - sleeps
        return combined(runs, seconds, time.process_time() - cpu, sleeps)

    return run


def combined(runs, seconds, cpu, sleeps):
    """Two readers' ``measure`` results as one run of ``seconds``, ``cpu`` CPU seconds and ``sleeps``."""
    samples = sum(r["samples"] for r in runs)
    return {
        "samples": samples,
        "batches": sum(r["batches"] for r in runs),
        "sleeps": sleeps,
        "bytes": sum(r["bytes"] for r in runs),
        "seconds": seconds,
        "samples_per_s": samples / seconds,
        "mb_per_s": sum(r["bytes"] for r in runs) / seconds / 1e6,
        "cpu_seconds": cpu,
        "samples_per_cpu_s": samples / cpu,
    }


_HUGE_PAGE_ADVICE = "NUMPY_MADVISE_HUGEPAGE"
# Run right after a reader in this process, two text readers in processes of their own whose numpy asks the kernel
# for huge pages for arrays of 4 MiB or more (its default) read 0.86-0.89x of their usual rate in 4 runs of 7; asking
# for none, in none of 5 (2026-11-30). Readers in one process are not moved by the advice (medians 0.99-1.01x, text
# and pb, threads(1) and threads(2)), nor are the two processes when no reader of this process runs between their
# runs. The control is taken without it, so that it never flatters threads(2).


class TwoProcesses:
    """Two processes, each with a ``threads(1)`` reader of one shard of the input (``shards``) or of all of it read
    half as many times, kept alive over the rounds; ``run()`` starts both readings at once and returns them as one run
    (``measure``'s fields).

    Each process reads and times itself; the wall time is the parent's, from the start signal to the
    second answer, so the combined samples/s counts the slower process in full.
    """

    def __init__(self, path, file_type, aux, unique, batch_size, shards=True):
        spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing inherited from this one
        self.pipes = []
        self.procs = []
        with mock.patch.dict(os.environ, {_HUGE_PAGE_ADVICE: "0"}):  # their numpy asks for no huge pages (above)
            for index in range(2):
                mine, theirs = spawn.Pipe()
                proc = spawn.Process(
                    target=_shard_process,
                    args=(theirs, str(path), file_type, aux, unique, batch_size, index if shards else None),
                    daemon=True,
                )
                proc.start()
                self.pipes.append(mine)
                self.procs.append(proc)

    def run(self):
        t0 = time.perf_counter()
        for pipe in self.pipes:
            pipe.send(True)
        runs = [pipe.recv() for pipe in self.pipes]
        seconds = time.perf_counter() - t0
        return combined(runs, seconds, sum(r["cpu_seconds"] for r in runs), sum(r["sleeps"] for r in runs))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for pipe, proc in zip(self.pipes, self.procs):
            pipe.send(False)
            proc.join(timeout=30)


def _shard_process(pipe, path, file_type, aux, unique, batch_size, index):
    """One of ``TwoProcesses``: read its ``shard_reader`` each time the parent says so."""
    measure(shard_reader(path, file_type, aux, unique, batch_size, index))  # warm-up: numba's cache, the page cache
    while pipe.recv():
        result = with_sleeps(shard_reader(path, file_type, aux, unique, batch_size, index))
        result.pop("stats")
        pipe.send(result)


def shard_reader(path, file_type, aux, unique, batch_size, index):
    """A ``threads(1)`` reader of shard ``index`` of 2 (None: all of the input, half as many times)."""
    if index is None:
        return ingest_reader(path, file_type, aux, 1, unique, EPOCHS[file_type] // 2, batch_size)
    return ingest_reader(path, file_type, aux, 1, unique, EPOCHS[file_type], batch_size).shard(index, 2)


if __name__ == "__main__":
    main()
