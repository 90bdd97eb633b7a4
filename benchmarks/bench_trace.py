"""Benchmark of trace files: what ``reader.trace()`` of every batch costs the reader, text and pb, 1 and 2 threads.

The readers of ``bench_peers.py`` (every synthetic feature, ``batch_size(1024)``; pb converted with
``--aux auto``, the user features in table 1), reading the samples over and over for ``--seconds``, traced with
``reader.trace(TraceWriter(...), arrays=("labels", "item.ids", "cate.ids"))``: the labels, the sample ids and two
features' ids of every batch, written to local files under ``benchmarks/out/``.  The trace is switched on and off
every ``BLOCK`` batches of the same run (the reader's hook set and unset between batches), so that both sides
of every comparison run a fraction of a second apart: whole runs, alternated, spread by ±10 % on this shared VM,
more than the 3 % to be shown.  The cost is 1 minus the median over pairs of neighbouring blocks of samples/s on
/ off, by wall time and by CPU time of the whole process (the writer thread's included); the first ``WARM_UP``
blocks are left out.  Bar: at most 3 %.  Each row runs again with the control, ``LeastTrace``, which copies the
same arrays into chunks a thread writes and does nothing else: what writing these bytes costs the machine.
Writes ``benchmarks/results/bench_trace.json``.

    python benchmarks/bench_trace.py [--samples 120000] [--seconds 20]
"""

import queue
import shutil
import statistics
import threading
import time

import numpy as np

from _common import OUT, RESULTS, arguments, cost_table, measured_on, save_report, synthetic_inputs
from bench_peers import THREADS, ingest_reader

from ingest.trace import TraceWriter

_CHUNK = 1 << 20

TRACED = ("labels", "item.ids", "cate.ids")  # and the sample ids, which every traced batch holds
BLOCK = 100  # batches: about 0.1 s of pb on 1 thread, 0.3 s of text
WARM_UP = 4  # blocks


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


def interleaved(path, file_type, aux, threads, seconds, least=False):
    """One run of ``seconds``, traced every other block (by ``LeastTrace`` when ``least``): ``{"off": ...,
    "on": ...}`` as ``cost_table`` takes it."""
    folder = OUT / "trace"
    shutil.rmtree(folder, ignore_errors=True)
    writer = LeastTrace(folder) if least else TraceWriter(folder)
    reader = ingest_reader(path, file_type, aux, threads, False, 0)
    if least:
        reader._trace = writer
    else:
        reader.trace(writer, arrays=TRACED)
    hook = reader._trace  # switched per block: the one setting that turns tracing on and off mid-run
    blocks = []  # (traced, samples, seconds, CPU seconds)
    reader.startup()
    try:
        batches = iter(reader)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end or len(blocks) % 2:
            traced = len(blocks) % 2 == 1
            reader._trace = hook if traced else None
            samples, t0, c0 = 0, time.perf_counter(), time.process_time()
            for _ in range(BLOCK):
                samples += next(batches).size
            blocks.append((traced, samples, time.perf_counter() - t0, time.process_time() - c0))
    finally:
        reader.shutdown()
        writer.close()
        shutil.rmtree(folder)
    pairs = list(zip(blocks[WARM_UP::2], blocks[WARM_UP + 1 :: 2]))
    out = {}
    for side, which in (("off", 0), ("on", 1)):
        chosen = [pair[which] for pair in pairs]
        out[side] = {
            "samples_per_s": sum(b[1] for b in chosen) / sum(b[2] for b in chosen),
            "samples_per_cpu_s": sum(b[1] for b in chosen) / sum(b[3] for b in chosen),
            "blocks": len(chosen),
            "ratio": statistics.median(on[1] / on[2] / (off[1] / off[2]) for off, on in pairs) if which else 1.0,
            "cpu_ratio": statistics.median(on[1] / on[3] / (off[1] / off[3]) for off, on in pairs) if which else 1.0,
        }
    return out


def main(argv=None):
    parser = arguments(__doc__, runs=None)
    parser.add_argument("--seconds", type=float, default=20.0, help="of each run (input and threads)")
    args = parser.parse_args(argv)
    inputs = synthetic_inputs(args.samples)
    results, least = {}, {}
    for name, (path, file_type, aux) in inputs.items():
        for threads in THREADS:
            results[f"{name} {threads}"] = interleaved(path, file_type, aux, threads, args.seconds)
            least[f"{name} {threads}"] = interleaved(path, file_type, aux, threads, args.seconds, least=True)
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
    print(f"JSON: {RESULTS / 'bench_trace.json'}")


if __name__ == "__main__":
    main()
