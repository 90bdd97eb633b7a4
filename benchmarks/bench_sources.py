"""Benchmark of the remote sources: the same samples read from a local file, HDFS, Kafka and Kafka over SASL_SSL.

Starts (or reuses) the real services of ``scripts/services.sh``, puts the synthetic text file on
HDFS and produces it to a Kafka topic of 2 partitions with ``ingest produce`` (about 100 KB of whole
sample groups per message), once over PLAINTEXT and once over the secured listener (SASL_SSL, SCRAM-SHA-512,
the services' SASL user; its topic named with the prefix the ACLs allow), then reads each with every synthetic
feature, ``threads(2)``, ``batch_size(1024)``, the direct Kafka client: three
warm-up rounds (the services' JVMs compile their read paths over the first reads: right after a start, HDFS
measured 0.49x of local against 0.61x a few minutes later), then ``--runs`` alternated rounds; medians, and
the median of the per-round ratios to the local file.  Writes ``benchmarks/results/bench_sources.json``.

With ``--pin`` the services' JVMs run on CPU 0 and this process on CPU 1 (``sched_setaffinity`` of every
JVM thread; restored at the end), so that a ratio measures the client rather than two programs sharing two
cores.  Services it starts get a broker with the full JIT: the test broker's C1-only JIT
(``TieredStopAtLevel=1``, for quick starts) has no AES-GCM intrinsics and serves TLS at ~35 MB/s; a broker
already running keeps the options it was started with (``KAFKA_JAVA_OPTS``).

    python benchmarks/bench_sources.py [--samples 120000] [--runs 3] [--pin]
"""

import os
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


BROKER_JAVA_OPTS = "-Xmx256m -Xms64m -XX:+UseSerialGC"  # the services' defaults without TieredStopAtLevel=1


def services():
    env = {"KAFKA_JAVA_OPTS": BROKER_JAVA_OPTS, **os.environ}
    done = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, check=True, env=env)
    return dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)


def pin_services(cpus):
    """Set the CPUs of every thread of the services' JVMs (their pid files, as scripts/services.sh keeps them)."""
    state = Path(os.environ.get("INGEST_SERVICES_DIR", Path.home() / ".cache" / "ingest-services"))
    for pidfile in (state / "kafka" / "kafka.pid", state / "hdfs" / "hdfs.pid"):
        pid = pidfile.read_text().strip()
        for task in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(task), cpus)


def secured(env):
    """The kafka() settings of the services' SASL user over SASL_SSL."""
    return {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": env["KAFKA_SASL_USER"],
        "sasl_plain_password": env["KAFKA_SASL_PASSWORD"],
        "ssl_cafile": env["KAFKA_CA_FILE"],
    }


def produce_topic(bootstrap, text, prefix="bench-", **security):
    """A new topic of PARTITIONS partitions holding the text file (``ingest produce``, ~100 KB messages)."""
    topic = f"{prefix}{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **security)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    admin.close()
    produce([str(text)], f"kafka://{bootstrap}/{topic}", message_bytes=MESSAGE_BYTES, log=lambda *_: None, **security)
    return topic


def reader(path, **kafka):
    r = ingest.DataReader("bench_sources", [path]).batch_size(1024).threads(2)
    return synthetic.declare(r).kafka(**kafka)


def main(argv=None):
    parser = arguments(__doc__, runs=3)
    parser.add_argument("--pin", action="store_true", help="the services on CPU 0, the reader on CPU 1")
    args = parser.parse_args(argv)
    text = synthetic_file(args.samples)
    env = services()
    fs, root = fsspec.core.url_to_fs(env["HDFS_URL"] + "/bench")
    fs.mkdirs(root, exist_ok=True)
    fs.put(str(text), f"{root}/{text.name}")
    topic = produce_topic(env["KAFKA_BOOTSTRAP"], text)
    secure = secured(env)
    secure_topic = produce_topic(env["KAFKA_SECURE_BOOTSTRAP"], text, env["KAFKA_SECURE_TOPIC_PREFIX"], **secure)
    paths = {
        "local": str(text),
        "hdfs": f"{env['HDFS_URL']}/bench/{text.name}",
        "kafka": f"kafka://{env['KAFKA_BOOTSTRAP']}/{topic}",
        "kafka SASL_SSL": f"kafka://{env['KAFKA_SECURE_BOOTSTRAP']}/{secure_topic}",
    }
    settings = {"kafka SASL_SSL": secure}
    every_cpu = os.sched_getaffinity(0)
    if args.pin:
        pin_services({0})
        os.sched_setaffinity(0, {1})  # threads started from here on inherit it
    try:
        results = alternated_runs(
            {name: (lambda n=name, p=p: reader(p, **settings.get(n, {}))) for name, p in paths.items()},
            args.samples,
            args.runs,
            warmups=3,
        )
    finally:
        if args.pin:
            pin_services(every_cpu)
            os.sched_setaffinity(0, every_cpu)
    # the two medians of per-round ratios to local, divided: SASL_SSL against PLAINTEXT in the same rounds
    results["kafka SASL_SSL"]["vs_kafka"] = results["kafka SASL_SSL"]["ratio"] / results["kafka"]["ratio"]
    name = "bench_sources_pinned" if args.pin else "bench_sources"
    report = save_report(name, samples=args.samples, runs=args.runs, pinned=args.pin, paths=paths, read=results)
    print(
        f"{args.samples:,} samples ({text.stat().st_size / 1e6:.1f} MB of text), threads 2, batch_size 1024, "
        f"{'services on CPU 0, reader on CPU 1, ' if args.pin else ''}median of {args.runs} rounds; "
        f"{measured_on(report)}\n"
    )
    print(
        markdown_table(
            ["source", "samples/s", "MB/s", "vs local", "vs kafka"],
            [
                [
                    name,
                    f"{r['samples_per_s']:,.0f}",
                    f"{r['mb_per_s']:.1f}",
                    f"{r['ratio']:.2f}x",
                    f"{r['vs_kafka']:.2f}x" if "vs_kafka" in r else "",
                ]
                for name, r in results.items()
            ],
        )
    )


if __name__ == "__main__":
    main()
