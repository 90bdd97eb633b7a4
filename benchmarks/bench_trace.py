"""Benchmark of trace files: what ``reader.trace()`` of every batch costs the reader, text and pb, 1 and 2 threads.

The readers of ``bench_peers.py`` (every synthetic feature, ``batch_size(1024)``; pb converted with
``--aux auto``, the user features in table 1), reading the samples over and over for ``--seconds``, traced as
``reader.trace(TraceWriter(...), arrays=("labels", "item.ids", "cate.ids"))`` traces: the labels, the sample ids
and two features' ids of every batch, written to local files under ``benchmarks/out/``.  The trace hook is called
on every other ``BLOCK`` batches of the same run (``_common.interleaved_blocks``), so that both sides of every
comparison run a fraction of a second apart: whole runs, alternated, spread by ±10 % on this shared VM, more
than the 3 % to be shown.  The cost is 1 minus the median over pairs of neighbouring blocks of samples/s on /
off, by wall time and by CPU time of the whole process (the writer thread's included).  Bar: at most 3 %.  Each
row runs again with the control, ``LeastTrace``, which copies the same arrays into chunks a thread writes and
does nothing else: what writing these bytes costs the machine.
Writes ``benchmarks/results/bench_trace.json``.

    python benchmarks/bench_trace.py [--samples 120000] [--seconds 20]
"""

import queue
import shutil
import threading

import numpy as np

from _common import (
    OUT,
    arguments,
    cost_table,
    interleaved_blocks,
    measured_on,
    report_path,
    save_report,
    synthetic_inputs,
)
from bench_peers import THREADS, ingest_reader

from ingest.trace import TraceWriter
from ingest.trace.hook import BatchTrace

_CHUNK = 1 << 20

TRACED = ("labels", "item.ids", "cate.ids")  # and the sample ids, which every traced batch holds
BLOCK = 100  # batches: about 0.1 s of pb on 1 thread, 0.3 s of text


class LeastTrace:
    """The control: the least any trace of these arrays can do, as a reader hook.  Each batch's arrays copied
    once (numpy) into 1 MiB chunks that a thread writes to a local file; no format, no steps, no checks.  What it
    costs is what writing the traced bytes costs this machine."""

    def __init__(self, folder):
        folder.mkdir(parents=True)
        self._chunks = queue.Queue(16)
        self._thread = threading.Thread(target=self._write, args=(folder / "least",))
        self._thread.start()
        self._chunk, self._pos = np.empty(2 * _CHUNK, np.uint8), 0

    def _write(self, path):
        with open(path, "wb") as f:
            while (chunk := self._chunks.get()) is not None:
                f.write(chunk)

    def took(self, batch):
        pos = self._pos
        for a in (
            batch.labels,
            *(batch[name.split(".")[0]].ids for name in TRACED[1:]),
            batch.sid_bytes,
            batch.sid_offsets,
        ):
            data = a.reshape(-1).view(np.uint8)
            self._chunk[pos : pos + len(data)] = data
            pos += len(data)
        if pos >= _CHUNK:
            self._chunks.put(self._chunk[:pos])
            self._chunk, pos = np.empty(2 * _CHUNK, np.uint8), 0
        self._pos = pos

    def close(self):
        self._chunks.put(None)
        self._thread.join()


def traced(path, file_type, aux, threads, seconds, least=False):
    """One run of ``seconds``, every other block of batches traced (by ``LeastTrace`` when ``least``)."""
    folder = OUT / "trace"
    shutil.rmtree(folder, ignore_errors=True)
    writer = LeastTrace(folder) if least else TraceWriter(folder)
    hook = writer if least else BatchTrace(writer, TRACED, every=1)  # what reader.trace() calls per batch taken
    try:
        return interleaved_blocks(ingest_reader(path, file_type, aux, threads, False, 0), hook.took, seconds, BLOCK)
    finally:
        writer.close()
        shutil.rmtree(folder)


def main(argv=None):
    parser = arguments(__doc__, runs=None)
    parser.add_argument("--seconds", type=float, default=20.0, help="of each run (input and threads)")
    args = parser.parse_args(argv)
    inputs = synthetic_inputs(args.samples)
    results, least = {}, {}
    for name, (path, file_type, aux) in inputs.items():
        for threads in THREADS:
            results[f"{name} {threads}"] = traced(path, file_type, aux, threads, args.seconds)
            least[f"{name} {threads}"] = traced(path, file_type, aux, threads, args.seconds, least=True)
    report = save_report(
        "bench_trace", samples=args.samples, seconds=args.seconds, block=BLOCK, traced=TRACED, read=results, least=least
    )
    print(
        f"{args.samples:,} samples read over and over for {args.seconds:g} s per row, batch_size 1024, traced every "
        f"other {BLOCK} batches: {', '.join(TRACED)} and the sample ids of every batch; median over pairs of "
        f"neighbouring blocks; {measured_on(report)}\n"
    )
    print(cost_table(results, "samples/s traced"))
    print("\nThe control, LeastTrace: the same arrays copied into 1 MiB chunks written by a thread, nothing else\n")
    print(cost_table(least, "samples/s, least trace"))
    print(f"JSON: {report_path('bench_trace')}")


if __name__ == "__main__":
    main()
