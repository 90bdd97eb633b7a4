"""The pb decoder against a walk of the same bytes that decodes nothing else: how far ``decode_chunk`` is from what
reading the wire format costs at all on this machine, and what a one-core reader spends beside it.

A reader of the synthetic pb file (every feature declared, ``--aux auto`` tables, ``threads(0)``, one pass) hands
each of its ``decode_chunk`` calls to a recorder, which keeps a copy of the call's arguments (its 1 MiB chunk, the
columns' starting state) and the bytes it consumed. Then, alternated ``--runs`` times in this one process, every
recorded chunk is copied into one reused buffer (as a read leaves it, in the cache) and decoded again by
``decode_chunk``, and copied again and walked by ``wire_walk``: a kernel that visits every field of the records it
consumed with the decoder's own varint and tag primitives and stores each id and value to a column, and does nothing
else (no name lookup, no wire-type or schema check, no rows, labels, sample ids or dense values kept). Both must find
the same ids. Reported: the medians of ns a sample and MB/s of each, and their ratio.

Then ``--runs`` one-core reads of the file (``threads(0)``, 8 passes, no unique ids: one thread does everything, so
its samples/s are per core) give the reader's time a sample by stage (``stats()["seconds"]``: ``read``, ``parse``,
``batch``), ``decode_chunk``'s part of ``parse`` timed around each call: the budget a sample leaves the decoder at
a target rate (``--target``, 2.5M samples/s) is 1e9 / target less the rest of the reader's time, reported as a
share of the decoder's time in the reader, beside the wire walk's share of the decoder's time in the replay.
Writes ``benchmarks/results/bench_decoder.json``.

    python benchmarks/bench_decoder.py [--samples 120000] [--runs 7] [--target 2500000]
"""

import statistics
import time

import numpy as np
from numba import njit

import ingest.formats.protobuf as protobuf_format
from ingest._native.jit import inline
from ingest._native.protobuf_wire import _len_field, _skip, _tag, _u32, _varint
from ingest.cli.bench import measure

from _common import arguments, markdown_table, measured_on, save_report, synthetic_inputs
from bench_peers import EPOCHS, ingest_reader


@inline
def _field(buf, p, end):
    """The field at ``p``: ``(number, payload start, payload end, next position)``.  Only a length-delimited field
    has a payload; another is passed over (a varint inline, the rest by the decoder's ``_skip``) and its payload is
    empty."""
    field, wt, p = _tag(buf, p, end)
    if wt == 2:
        a, b = _len_field(buf, p, end)
        return field, a, b, b
    q = _varint(buf, p, end)[1] if wt == 0 else _skip(buf, p, end, wt, field)
    return field, q, q, q


@njit(nogil=True, cache=True)
def wire_walk(buf, end, keys, values):
    """Walk the whole ``SampleGroup`` records of ``buf[:end]``, storing each FeatureValue's key in ``keys`` and its
    value's bits at the same place of ``values``; returns the number of keys.  The fields it does not go into are
    passed over (``_field``)."""
    ids = 0
    pos = 0
    while pos + 4 <= end:
        a = pos + 4
        b = a + np.int64(_u32(buf, pos))
        if b > end:
            break
        p = a
        while p < b:  # SampleGroup: its FeatureTables
            field, fa, fb, p = _field(buf, p, b)
            q = fa
            while field == 3 and q < fb:  # FeatureTable: its FeatureLines
                _, la, lb, q = _field(buf, q, fb)
                r = la
                while r < lb:  # FeatureLine: refer, Features
                    f1, xa, xb, r = _field(buf, r, lb)
                    s = xa
                    while f1 == 1 and s < xb:  # Feature: type, name, FeatureValues
                        f2, ya, yb, s = _field(buf, s, xb)
                        t = ya
                        at = -1  # where this FeatureValue's key went
                        while f2 == 3 and t < yb:  # FeatureValue: key, value, hkey, vector
                            f3, w3, t = _tag(buf, t, yb)
                            if f3 == 1 and w3 == 0:
                                v, t = _varint(buf, t, yb)
                                at = ids
                                keys[ids] = np.int64(v)
                                ids += 1
                            elif f3 == 2 and w3 == 5:
                                if at >= 0:
                                    values[at] = _u32(buf, t)
                                t += 4
                            elif w3 == 0:
                                t = _varint(buf, t, yb)[1]
                            else:
                                t = _skip(buf, t, yb, w3, f3)
        pos = b
    return ids


class Recorder:
    """Stands in for ``decode_chunk`` in the protobuf format: decodes, and keeps a copy of each call's arguments and
    the bytes it consumed (a call that finds a column's region full stops early, and the reader calls again): of
    the columns, their sizes and the regions' starting state."""

    def __init__(self, decode):
        self.decode = decode
        self.calls = []

    def __call__(self, buf, end, final, options, names, layout, cols, rows):
        sizes = tuple(len(a) for a in cols[:3])  # keys, hkeys, values: the replay writes to arrays of its own
        regions = tuple(a.copy() for a in cols[3:])  # first, cur, lim as they start (cur is written)
        out = self.decode(buf, end, final, options, names, layout, cols, rows)
        self.calls.append((buf[:end].copy(), end, final, options, names, layout, sizes, regions, rows, out[1]))
        return out


class Timed:
    """Stands in for ``decode_chunk``: adds up the time of each call."""

    def __init__(self, decode):
        self.decode = decode
        self.seconds = 0.0

    def __call__(self, *args):
        t0 = time.perf_counter()
        out = self.decode(*args)
        self.seconds += time.perf_counter() - t0
        return out


def with_decoder(stand_in, read):
    """``read()`` with the protobuf format's ``decode_chunk`` replaced by ``stand_in``."""
    kernels = protobuf_format.K
    real = kernels.decode_chunk
    kernels.decode_chunk = stand_in
    try:
        return read()
    finally:
        kernels.decode_chunk = real


def replay_seconds(calls, decode, walk):
    """Seconds of ``decode`` over every recorded call and of ``walk`` over the bytes each consumed; both must find
    the same ids.  As in the reader, each starts on its chunk just copied into one reused buffer (as a read
    leaves it, in the cache) and writes to columns of its own (``decode`` from the starting state it had)."""
    chunk = np.empty(max(len(c[0]) for c in calls), np.uint8)
    size = max(max(c[6]) for c in calls)
    columns = (np.empty(size, np.int64), np.empty(size, np.int64), np.empty(size, np.float32))
    keys = np.empty(len(chunk) // 2, np.int64)  # an id takes at least 2 bytes
    values = np.empty(len(keys), np.uint32)
    decoded = walked = 0.0
    for buf, end, final, options, names, layout, sizes, start, rows, consumed in calls:
        regions = tuple(a.copy() for a in start)  # first, cur, lim
        fresh = tuple(c[:n] for c, n in zip(columns, sizes)) + regions
        chunk[:end] = buf
        t0 = time.perf_counter()
        decode(chunk, end, final, options, names, layout, fresh, rows)
        decoded += time.perf_counter() - t0
        chunk[:end] = buf
        t0 = time.perf_counter()
        ids = walk(chunk, consumed, keys, values)
        walked += time.perf_counter() - t0
        first, cur = regions[0], regions[1]
        if ids != int((cur - first).sum()):  # the same ids, or the comparison means nothing
            raise SystemExit(f"wire_walk found {ids} ids in a chunk, decode_chunk {int((cur - first).sum())}")
    return decoded, walked


def main(argv=None):
    parser = arguments(__doc__, runs=7)
    parser.add_argument("--target", type=float, default=2.5e6, help="samples/s a core (default: 2.5M)")
    args = parser.parse_args(argv)
    path, file_type, aux = synthetic_inputs(args.samples)["pb"]
    decode = protobuf_format.K.decode_chunk
    recorder = Recorder(decode)
    with_decoder(recorder, lambda: measure(ingest_reader(path, file_type, aux, 0, False)))
    calls = recorder.calls
    nbytes = sum(c[-1] for c in calls)  # the file's, each byte consumed once
    replay_seconds(calls, decode, wire_walk)  # compiles or loads wire_walk
    replays = [replay_seconds(calls, decode, wire_walk) for _ in range(args.runs)]
    decode_s = statistics.median(r[0] for r in replays)
    walk_s = statistics.median(r[1] for r in replays)
    ratio = statistics.median(r[0] / r[1] for r in replays)

    reads = []
    for _ in range(args.runs + 1):  # the first is a warm-up
        timed = Timed(decode)
        run = with_decoder(timed, lambda: measure(ingest_reader(path, file_type, aux, 0, False, EPOCHS["pb"])))
        reads.append((run, timed.seconds))
    reads = reads[1:]
    samples = reads[0][0]["samples"]

    def ns(values):
        return 1e9 * statistics.median(values) / samples

    stage = {name: ns(run["stats"]["seconds"][name] for run, _ in reads) for name in ("read", "parse", "batch", "wall")}
    stage["decode_chunk"] = ns(seconds for _, seconds in reads)
    beside = stage["wall"] - stage["decode_chunk"]
    budget = 1e9 / args.target - beside
    report = save_report(
        "bench_decoder",
        samples=args.samples,
        runs=args.runs,
        decode_calls=len(calls),
        file_bytes=nbytes,
        replay={
            "decode_chunk_ns_per_sample": 1e9 * decode_s / args.samples,
            "wire_walk_ns_per_sample": 1e9 * walk_s / args.samples,
            "decode_chunk_mb_per_s": nbytes / decode_s / 1e6,
            "wire_walk_mb_per_s": nbytes / walk_s / 1e6,
            "ratio": ratio,
        },
        reader_threads0={
            "samples_per_s": statistics.median(run["samples_per_s"] for run, _ in reads),
            "ns_per_sample": stage,
        },
        target_samples_per_s=args.target,
        decoder_budget_ns_per_sample=budget,
        decoder_budget_share=budget / stage["decode_chunk"],
    )
    r = report["replay"]
    print(f"\n{measured_on(report)}, {len(calls)} decode calls over {nbytes / 1e6:.1f} MB, medians of {args.runs}:")
    print(
        markdown_table(
            ["", "ns a sample", "MB/s"],
            [
                ["decode_chunk", f"{r['decode_chunk_ns_per_sample']:.0f}", f"{r['decode_chunk_mb_per_s']:.0f}"],
                ["wire_walk", f"{r['wire_walk_ns_per_sample']:.0f}", f"{r['wire_walk_mb_per_s']:.0f}"],
                ["decode_chunk / wire_walk", f"{ratio:.2f}x", ""],
            ],
        )
    )
    t = report["reader_threads0"]
    print(f"\none core (threads(0)): {t['samples_per_s']:,.0f} samples/s; ns a sample by stage:")
    print(markdown_table(list(stage), [[f"{v:.0f}" for v in stage.values()]]))
    share = budget / stage["decode_chunk"]
    print(
        f"\nat {args.target:,.0f} samples/s a core: {1e9 / args.target:.0f} ns a sample, of which the rest of the "
        f"reader takes {beside:.0f}: the decoder may take {budget:.0f} ns, {share:.2f}x its time in the reader; "
        f"the wire walk takes {1 / ratio:.2f}x the decoder's time"
    )


if __name__ == "__main__":
    main()
