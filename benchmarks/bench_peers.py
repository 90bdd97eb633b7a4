"""ingest against the pipelines a user would pick instead, on the same synthetic samples.

Readers of the same 120,000 synthetic ads samples, every feature (11 sparse with their
values, 2 dense, 2 labels), batches of 1024, at 1 and 2 threads, with and without per-batch
unique ids:

- ``ingest text``: ``DataReader`` over the text file (``threads(n)``, ``unique_ids``);
- ``ingest pb``: ``DataReader`` over the same samples converted to ``pb`` with ``--aux auto``;
- ``tf.data text``: ``TextLineDataset`` -> ``batch(1024)`` -> ``map`` of ``tf.strings`` ops that
  split the XDL text format into per-feature ragged ids and values, dense matrices and labels
  (``num_parallel_calls=n``);
- ``TFRecord``: the samples as ``tf.train.Example`` (per sparse feature an int64 list of ids and a
  float list of values, dense and labels fixed-length floats) -> ``batch(1024)`` ->
  ``tf.io.parse_example`` with ``RaggedFeature``s (``num_parallel_calls=n``);
- ``ingest pb.zst``: ``DataReader`` over the pb file compressed with zstd (``ingest convert`` to ``.pb.zst``);
- ``Parquet``: the samples as ``ingest convert`` writes Parquet (one row per sample, large_list ids and values
  per sparse feature, fixed-size lists for dense ones and labels, zstd, row groups of 65,536), read by
  pyarrow's C++ reader (``ParquetFile.iter_batches``, ``use_threads`` and ``pyarrow.set_cpu_count(n)``) with
  every column taken into numpy offsets and values: what Merlin, Ray Data and Petastorm read.  Unique ids are
  not asked of it (pyarrow has none per batch); its rows stay empty with unique ids on.

With unique ids on, the TensorFlow pipelines add ``tf.unique`` over each sparse feature's ids in
the map.  TensorFlow runs in a subprocess per configuration (alive through every round) with its
thread pools (intra-op, inter-op, the dataset's private pool) set to n, ``deterministic = False``, and
its batches are consumed inside the graph (``Dataset.reduce``, as ``model.fit`` would), so it pays
nothing per batch in Python while ingest's batches are taken in a Python loop: the ratios favour
TensorFlow.  ingest reads the samples several times over in a run (``EPOCHS``: 3 for text, 8 for pb), so
that its runs last about a second, as TensorFlow's do; samples/s are comparable whatever the count.  A
warm-up round, then ``--runs`` rounds, each one pass of every reader of every
configuration back to back (the VM's speed moves over minutes: runs of the readers compared are
seconds apart); medians, and ratios as the medians of per-round ratios.  Each 2-thread ingest reader has
its control in the same round: two processes, each a 1-thread reader of one shard, started together
(``bench_scaling.TwoProcesses``: what the machine gives two cores that share nothing of Python).  Prints a table with
ratios of ingest to its peer, of 2 threads to 1 and of ingest's 2 threads to its two processes, writes
``benchmarks/results/bench_peers.json``.
Needs ``pip install 'ingest[tf]'``.

    python benchmarks/bench_peers.py [--samples 120000] [--runs 3]
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import ingest
from ingest import synthetic
from ingest.cli.bench import measure

from _common import OUT, arguments, converted, markdown_table, measured_on, report_path, save_report, synthetic_inputs

BATCH_SIZE = 1024
THREADS = (1, 2)
# ingest reads its file this many times in a run, so that a run lasts about a second here: thread start and
# the last batches (one thread busy) then weigh little.  The 120,000 samples read once took ~0.1 s in pb.
EPOCHS = {"txt": 3, "pb": 8}
READERS = ("ingest text", "tf.data text", "ingest pb", "TFRecord", "ingest pb.zst", "Parquet")  # the table's order


# -- ingest ---------------------------------------------------------------------------------------
def ingest_reader(path, file_type, aux, threads, unique, epochs=1, batch_size=BATCH_SIZE):
    reader = ingest.DataReader("bench_peers", paths=[str(path)], file_type=file_type)
    reader.batch_size(batch_size).threads(threads).unique_ids(unique).epochs(epochs)
    return synthetic.declare(reader, aux=aux, serialized=True)


# -- Parquet, read by pyarrow ------------------------------------------------------------------------
def parquet_run(path, threads, epochs):
    """Samples/s of reading the Parquet file ``epochs`` times, every column into numpy offsets and values."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pa.set_cpu_count(threads)
    samples, t0 = 0, time.perf_counter()
    for _ in range(epochs):
        for record_batch in pq.ParquetFile(path).iter_batches(batch_size=65536, use_threads=threads > 1):
            for column in record_batch.columns:
                while isinstance(column, (pa.ListArray, pa.LargeListArray, pa.FixedSizeListArray)):
                    if not isinstance(column, pa.FixedSizeListArray):
                        column.offsets.to_numpy()
                    column = column.values
                column.to_numpy(zero_copy_only=False)
            samples += record_batch.num_rows
    return samples / (time.perf_counter() - t0)


# -- TensorFlow (in a subprocess per configuration) -------------------------------------------------
def _tf(threads):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    return tf


def _options(tf, threads):
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    options.deterministic = False  # as ingest's default: batches in whatever order they are ready
    return options


def tf_text_dataset(tf, path, threads, unique):
    """XDL text lines parsed with tf.strings: per sparse feature ragged ids and values."""
    names = list(synthetic.SPARSE)
    dense = list(synthetic.DENSE.items())

    def parse(lines):
        fields = tf.strings.split(lines, "|").to_tensor(shape=[None, 6])
        out = {"labels": tf.strings.to_number(tf.strings.split(fields[:, 4], ",").to_tensor(), tf.float32)}
        entries = tf.strings.split(tf.strings.split(fields[:, 2], ";"), "@").to_tensor()  # [B, F, 2]
        feat_names = entries[:, :, 0]
        tokens = tf.strings.split(entries[:, :, 1], ",")  # ragged [B, F, V]: "key" or "key:value"
        flat = tokens.flat_values
        keys = tokens.with_flat_values(tf.strings.to_number(tf.strings.regex_replace(flat, ":.*", ""), tf.int64))
        weight = tf.strings.regex_replace(flat, "^[^:]*:?", "")
        weights = tokens.with_flat_values(tf.strings.to_number(tf.where(weight == "", "1", weight), tf.float32))
        for name in names:
            mask = tf.equal(feat_names, name)
            ids = tf.ragged.boolean_mask(keys, mask).merge_dims(1, 2)
            out[name] = (ids, tf.ragged.boolean_mask(weights, mask).merge_dims(1, 2))
            if unique:
                out[name + "/unique"] = tf.unique(ids.flat_values)
        dense_entries = tf.strings.split(tf.strings.split(fields[:, 3], ";"), "@").to_tensor()
        for j, (name, nvec) in enumerate(dense):
            vector = tf.strings.split(dense_entries[:, j, 1], ",").to_tensor(shape=[None, nvec])
            out[name] = tf.strings.to_number(vector, tf.float32)
        return out

    ds = tf.data.TextLineDataset(str(path)).batch(BATCH_SIZE).map(parse, num_parallel_calls=threads)
    return ds.prefetch(4).with_options(_options(tf, threads))


def tf_record_write(tf, text_path, out_path):
    """The samples of the text file as tf.train.Example records (read with ingest)."""
    reader = ingest_reader(text_path, "txt", set(), 1, False)
    with tf.io.TFRecordWriter(str(out_path)) as writer:
        for batch in reader.startup():
            for r in range(batch.size):
                feature = {"labels": tf.train.Feature(float_list=tf.train.FloatList(value=batch.labels[r]))}
                for name in synthetic.SPARSE:
                    f = batch[name]
                    a, b = f.offsets[r], f.offsets[r + 1]
                    feature[name + "/ids"] = tf.train.Feature(int64_list=tf.train.Int64List(value=f.ids[a:b]))
                    feature[name + "/values"] = tf.train.Feature(float_list=tf.train.FloatList(value=f.values[a:b]))
                for name in synthetic.DENSE:
                    feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=batch[name][r]))
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def tf_record_dataset(tf, path, threads, unique):
    spec = {"labels": tf.io.FixedLenFeature([synthetic.LABEL_COUNT], tf.float32)}
    for name in synthetic.SPARSE:
        spec[name + "/ids"] = tf.io.RaggedFeature(tf.int64)
        spec[name + "/values"] = tf.io.RaggedFeature(tf.float32)
    for name, nvec in synthetic.DENSE.items():
        spec[name] = tf.io.FixedLenFeature([nvec], tf.float32)

    def parse(records):
        out = tf.io.parse_example(records, spec)
        if unique:
            for name in synthetic.SPARSE:
                out[name + "/unique"] = tf.unique(out[name + "/ids"].flat_values)
        return out

    ds = tf.data.TFRecordDataset(str(path)).batch(BATCH_SIZE).map(parse, num_parallel_calls=threads)
    return ds.prefetch(4).with_options(_options(tf, threads))


def _rows(batch):
    import tensorflow as tf

    return tf.shape(batch["labels"], out_type=tf.int64)[0]


def _add(total, rows):
    return total + rows


def tf_worker(kind, path, threads, unique):
    """Serve passes over the dataset: a line on stdin asks for one, the answer is its samples/s on stdout.  The
    process lives through every round, so TensorFlow starts and builds its graph once."""
    tf = _tf(threads)
    make = tf_text_dataset if kind == "tf-text" else tf_record_dataset
    for _ in sys.stdin:
        # consumed in the graph (as model.fit would): no Python per batch, TensorFlow's best case
        ds = make(tf, path, threads, unique).map(_rows)
        t0 = time.perf_counter()
        n = int(ds.reduce(tf.constant(0, tf.int64), _add))
        print(json.dumps(n / (time.perf_counter() - t0)), flush=True)


class TFReader:
    """A TensorFlow configuration in a subprocess of its own (``tf_worker``), one pass per ``run()``."""

    def __init__(self, kind, path, threads, unique):
        cmd = [sys.executable, __file__, "--worker", kind, "--input", str(path), "--threads", str(threads)] + (
            ["--unique"] if unique else []
        )
        self.kind = kind
        self.process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self):
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"bench_peers: {self.kind} failed (exit {self.process.wait()})")
        return json.loads(line)

    def close(self):
        self.process.stdin.close()
        self.process.wait()


# -- main --------------------------------------------------------------------------------------------
def main(argv=None):
    parser = arguments(__doc__, runs=3)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--unique", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--write-tfrecord", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        tf_worker(args.worker, args.input, args.threads, args.unique)
        return
    if args.write_tfrecord:
        tf_record_write(_tf(2), args.input, args.write_tfrecord)
        return

    inputs = synthetic_inputs(args.samples)
    text, pb, aux = inputs["text"][0], inputs["pb"][0], inputs["pb"][2]
    tfrecord = OUT / f"{text.stem}.tfrecord"
    if not tfrecord.exists():
        print(f"writing {tfrecord} ...", file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, __file__, "--input", str(text), "--write-tfrecord", str(tfrecord) + ".partial"], check=True
        )
        os.replace(str(tfrecord) + ".partial", tfrecord)

    pb_zst, parquet = converted(text, ".pb.zst"), converted(text, ".parquet")
    configs = [(unique, threads) for unique in (False, True) for threads in THREADS]
    from bench_scaling import TwoProcesses  # noqa: PLC0415 - bench_scaling imports this module

    # the control of every 2-thread ingest reader: two 1-thread processes, a shard each (pb.zst: its shards are
    # uneven runs of frames, so each reads the whole file half as many times), as bench_scaling runs them
    ingest_inputs = {
        "ingest text": (text, "txt", set()),
        "ingest pb": (pb, "pb", aux),
        "ingest pb.zst": (pb_zst, "pb", aux),
    }
    controls = {
        (unique, name): TwoProcesses(path, file_type, aux_names, unique, BATCH_SIZE, shards=name != "ingest pb.zst")
        for unique in (False, True)
        for name, (path, file_type, aux_names) in ingest_inputs.items()
    }
    tf_readers = {
        (unique, threads): {
            "tf.data text": TFReader("tf-text", text, threads, unique),
            "TFRecord": TFReader("tf-record", tfrecord, threads, unique),
        }
        for unique, threads in configs
    }

    def one_round():
        """A pass of every reader of every configuration, back to back: samples/s by configuration and reader (each
        2-thread ingest reader followed at once by its control)."""
        out = {}
        for unique, threads in configs:
            rates = out[unique, threads] = {}
            for name, (path, file_type, aux_names) in ingest_inputs.items():
                reader = ingest_reader(path, file_type, aux_names, threads, unique, EPOCHS[file_type])
                rates[name] = measure(reader)["samples_per_s"]
                if threads == 2:
                    rates[f"{name}, 2 processes"] = controls[unique, name].run()["samples_per_s"]
            rates["Parquet"] = float("nan") if unique else parquet_run(parquet, threads, EPOCHS["pb"])
            rates.update({name: tf.run() for name, tf in tf_readers[unique, threads].items()})
        return out

    one_round()  # warm-up: kernels, page cache, TensorFlow's graphs
    rounds = []
    for k in range(args.runs):
        rounds.append(one_round())
        print(f"round {k + 1} of {args.runs}", file=sys.stderr, flush=True)
    for readers in tf_readers.values():
        for tf in readers.values():
            tf.close()
    for two in controls.values():
        two.close()
    results = [
        {
            "unique": unique,
            "threads": threads,
            **{name: [r[unique, threads][name] for r in rounds] for name in rounds[0][unique, threads]},
        }
        for unique, threads in configs
    ]
    sizes = {"pb.zst": os.path.getsize(pb_zst), "parquet": os.path.getsize(parquet)}
    report = save_report(
        "bench_peers", samples=args.samples, runs=args.runs, batch_size=BATCH_SIZE, results=results, file_bytes=sizes
    )
    print(
        f"{args.samples:,} samples (ingest reads them {EPOCHS['txt']} times over in text, {EPOCHS['pb']} in pb), "
        f"batch_size {BATCH_SIZE}, median samples/s of {args.runs} rounds "
        f"(ratios: medians of the per-round ratios); {measured_on(report)}\n"
    )

    def ratio(a, b):
        """Median over the rounds of the ratio of two readers' rates in the same round: ``a`` and ``b`` are
        (configuration, reader name)."""
        return statistics.median(r[a[0]][a[1]] / r[b[0]][b[1]] for r in rounds)

    rows = []
    for r in results:
        config = (r["unique"], r["threads"])
        med = {name: statistics.median(r[name]) for name in READERS}
        rows.append(
            ["on" if r["unique"] else "off", r["threads"]]
            + ["-" if math.isnan(med[k]) else f"{med[k]:,.0f}" for k in READERS]
            + [
                f"{ratio((config, 'ingest text'), (config, 'tf.data text')):.1f}x",
                f"{ratio((config, 'ingest pb'), (config, 'TFRecord')):.1f}x",
                "-" if r["unique"] else f"{ratio((config, 'ingest pb.zst'), (config, 'Parquet')):.2f}x",
            ]
        )
    columns = ["text vs tf.data", "pb vs TFRecord", "pb.zst vs Parquet"]
    print(markdown_table(["unique ids", "threads"] + list(READERS) + columns, rows))
    print("file sizes: " + ", ".join(f"{name} {size / 1e6:.0f} MB" for name, size in sizes.items()))
    for unique in (False, True):
        scaling = ", ".join(
            f"{k} {ratio(((unique, 2), k), ((unique, 1), k)):.2f}x" for k in READERS if not (unique and k == "Parquet")
        )
        print(f"2 threads / 1 thread, unique ids {'on' if unique else 'off'}: {scaling}")
        control = ", ".join(
            f"{name} {ratio(((unique, 2), name), ((unique, 2), f'{name}, 2 processes')):.2f}x" for name in ingest_inputs
        )
        print(f"2 threads / 2 single-thread processes, unique ids {'on' if unique else 'off'}: {control}")
    print(f"JSON: {report_path('bench_peers')}")


if __name__ == "__main__":
    main()
