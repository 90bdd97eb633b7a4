"""Benchmark of the remote sources: the same samples read from a local file, HDFS and Kafka.

Starts (or reuses) the real services of ``scripts/services.sh``, puts the synthetic text file on
HDFS and produces it to a Kafka topic of 2 partitions with ``ingest produce`` (about 100 KB of whole
sample groups per message), then reads each with every synthetic feature, ``threads(2)``, ``batch_size(1024)``: three
warm-up rounds (the services' JVMs compile their read paths over the first reads: right after a start, HDFS
measured 0.49x of local against 0.61x a few minutes later), then ``--runs`` alternated rounds; medians, and
the median of the per-round ratios to the local file.  Writes ``benchmarks/results/bench_sources.json``.

    python benchmarks/bench_sources.py [--samples 120000] [--runs 3]
"""

import subprocess
import uuid
from pathlib import Path

import fsspec
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

import ingest
from ingest import synthetic
from ingest.produce import produce

from _common import alternated_runs, arguments, markdown_table, measured_on, save_report, synthetic_file

PARTITIONS = 2
MESSAGE_BYTES = 100_000
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "services.sh"


def services():
    done = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, check=True)
    return dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)


def produce_topic(bootstrap, text):
    """A new topic of PARTITIONS partitions holding the text file (``ingest produce``, ~100 KB messages)."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    admin.close()
    produce([str(text)], f"kafka://{bootstrap}/{topic}", message_bytes=MESSAGE_BYTES, log=lambda *_: None)
    return topic


def reader(path):
    r = ingest.DataReader("bench_sources", [path]).batch_size(1024).threads(2)
    return synthetic.declare(r)


def main(argv=None):
    args = arguments(__doc__, runs=3).parse_args(argv)
    text = synthetic_file(args.samples)
    env = services()
    fs, root = fsspec.core.url_to_fs(env["HDFS_URL"] + "/bench")
    fs.mkdirs(root, exist_ok=True)
    fs.put(str(text), f"{root}/{text.name}")
    topic = produce_topic(env["KAFKA_BOOTSTRAP"], text)
    paths = {
        "local": str(text),
        "hdfs": f"{env['HDFS_URL']}/bench/{text.name}",
        "kafka": f"kafka://{env['KAFKA_BOOTSTRAP']}/{topic}",
    }
    results = alternated_runs(
        {name: (lambda p=p: reader(p)) for name, p in paths.items()}, args.samples, args.runs, warmups=3
    )
    report = save_report("bench_sources", samples=args.samples, runs=args.runs, paths=paths, read=results)
    print(
        f"{args.samples:,} samples ({text.stat().st_size / 1e6:.1f} MB of text), threads 2, batch_size 1024, "
        f"median of {args.runs} rounds; {measured_on(report)}\n"
    )
    print(
        markdown_table(
            ["source", "samples/s", "MB/s", "vs local"],
            [
                [name, f"{r['samples_per_s']:,.0f}", f"{r['mb_per_s']:.1f}", f"{r['ratio']:.2f}x"]
                for name, r in results.items()
            ],
        )
    )


if __name__ == "__main__":
    main()
