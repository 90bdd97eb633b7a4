"""DataReader: options, lifecycle and iteration (docs/formats.md, reader options)."""

import dataclasses
import os
import warnings
import weakref

from . import formats, warmup
from . import state as state_format
from .batch import Batch
from .dsl.compiler import check_feature
from .dsl.conf import located_at
from .dsl.stage import dsl_stage
from .errors import ConfigError, ReaderClosedError
from .features import Schema, make_feature
from .ops import OpStage, as_op
from .options import ReaderOptions, flag as _flag, positive_int as _positive_int
from .pipeline.batcher import BatchBuilder
from .pipeline.coverage import Coverage
from .pipeline.progress import Progress
from .pipeline.rounds import Rounds
from .pipeline.runner import Flow, PipelineDelivery, Stages, runner_for
from .pipeline.shuffle import GroupShuffle
from .pipeline.stats import Stats
from .pipeline.timeline import Timeline
from .sources.compression import check_codec, trim_frame_buffers
from .sources.filesystems import check_writable
from .sources.plan import plan_paths, sources_of
from .sources.registry import scheme_of, source_for
from .trace.background import file_mb
from .trace.hook import BatchTrace

__all__ = ["DataReader"]

_POLICIES = ("raise", "skip")


def _close(pipeline, member, committers, stats):
    """Stop a reader's threads (and leave its consumer group), also when it is garbage collected; end its timeline."""
    pipeline.close()
    for other in ([member] if member is not None else []) + committers:
        other.close()
    stats.end_timeline()


class DataReader:
    """Reads sample files into batches.

    Options are set with chainable methods before ``startup()``; then iterate::

        reader = ingest.DataReader("r1", paths=["data.txt"], file_type=ingest.parsers.txt)
        reader.batch_size(1024).label_count(2).threads(2)
        reader.feature(name="item", type=ingest.features.sparse)
        reader.startup()
        for batch in reader:
            ...

    Parameters
    ----------
    name : str
        Name of the reader, used in messages.
    paths : list of str
        Files, directories (read recursively, hidden and ``_``-prefixed files skipped),
        globs and fsspec URLs, read in the given order, each expanded sorted.
    file_type : ingest.parsers member
    enable_state : bool
        Track what the consumer was handed, for ``state()`` / ``restore()`` (exact resume, docs/state.md).
    """

    def __init__(self, name: str, paths=None, file_type=formats.FileType.txt, enable_state: bool = False) -> None:
        self.name = name
        paths = list(paths) if paths is not None and not isinstance(paths, str) else paths
        self._options = ReaderOptions(
            paths=paths, file_type=formats.file_type(file_type), enable_state=_flag("enable_state", enable_state)
        )
        self._runtime()

    def _runtime(self):
        """What a run keeps besides the options: made at startup(), never pickled."""
        self._stats = Stats()
        self._progress = None
        self._saved_at = 0
        self._committers = []  # what reports delivered positions to a source (a fixed assignment's group)
        self._member = None  # the unit source when a group assigns the units (group_id on topic URLs)
        self._state_header = None
        self._pipeline = None
        self._started = False
        self._finalizer = None
        self._coverage = None
        self._units = None
        self._buffers = None  # where batches are built (default: a BufferPool); ingest.torch's workers set it
        self._trace = None  # the BatchTrace of trace()

    def __getstate__(self):
        """A reader pickles before ``startup()``: its name and options (threads, queues and sockets are made at
        ``startup()``), so that it can be handed to worker processes."""
        if self._started:
            raise ConfigError(f"reader {self.name!r}: a started reader cannot be pickled; pickle it before startup()")
        if self._trace is not None:
            raise ConfigError(f"reader {self.name!r}: a reader with trace() cannot be pickled; call trace() after")
        return {"name": self.name, "options": self._options}

    def __setstate__(self, state):
        self.name = state["name"]
        self._options = state["options"]
        self._runtime()

    def _set(self, **changes):
        self._option()
        self._options = dataclasses.replace(self._options, **changes)
        return self

    # -- options -----------------------------------------------------------------------------
    def _option(self):
        if self._started:
            raise ConfigError(f"reader {self.name!r}: options are fixed once startup() has run")

    def shuffle(self, seed, buffer=None) -> "DataReader":
        """Read the work units (files, byte ranges, partitions) of each epoch in an order drawn from ``seed``
        and the epoch number; samples keep their order within a unit.  None turns it off.

        With ``buffer=n`` the sample groups are shuffled too, within windows of ``n`` groups (the groups of an
        epoch in reading order, cut every ``n``), each in an order drawn from the seed, the epoch and the
        window: reproducible for a seed, and within exact resume (a restored reader delivers the remaining
        samples in the order the uninterrupted one would have).  Batches then follow one block stream in input
        order, as with ``deterministic(True)``; docs/decisions.md gives the cost."""
        self._option()
        if seed is not None:
            seed = _positive_int("shuffle seed", seed, 0)
        if buffer is not None:
            if seed is None:
                raise ConfigError(f"shuffle(seed=None, buffer={buffer!r}): a buffer needs a seed")
            buffer = _positive_int("shuffle buffer", buffer)
        return self._set(shuffle=seed, shuffle_buffer=buffer)

    def epochs(self, n) -> "DataReader":
        """Passes over the input; 0 repeats forever."""
        return self._set(epochs=_positive_int("epochs", n, 0))

    def batch_size(self, n) -> "DataReader":
        return self._set(batch_size=_positive_int("batch_size", n))

    def label_count(self, n) -> "DataReader":
        """Label columns: lines with fewer labels are errors, extra labels are checked and dropped."""
        return self._set(label_count=_positive_int("label_count", n, 0))

    def threads(self, n) -> "DataReader":
        """Parallel parse workers (the parse kernels release the GIL).  0: none, ``next()`` reads and parses in the
        consumer's thread (for a process that is one of several workers: a ``DataLoader``'s, a Ray task's)."""
        return self._set(threads=_positive_int("threads", n, 0))

    def feature(self, name, type, table=0, nvec=None, serialized=False, dsl=None, cutoff=0, mask=None) -> "DataReader":
        """Declare a feature to emit (docs/formats.md, reader options); undeclared features are skipped."""
        self._option()
        spec = make_feature(name, type, table, nvec, serialized, dsl, cutoff, mask)
        if any(s.name == spec.name for s in self._options.specs):
            raise ConfigError(f"feature {name!r} is declared twice")
        if spec.dsl is not None:
            check_feature(spec, {s.name: s for s in self._options.specs})
        return self._set(specs=self._options.specs + (spec,))

    def features(self, specs) -> "DataReader":
        """Declare several features (FeatureSpecs, e.g. from ``ingest.load_feature_conf``), in order; the error
        about a feature of a conf file names the file and line."""
        for s in specs:
            with located_at(s.origin):
                self.feature(s.name, s.type, s.table, s.nvec or None, s.serialized, s.dsl, s.cutoff, s.mask)
        return self

    def add_op(self, op) -> "DataReader":
        """Run ``op`` on every sample group before batching (docs/ops.md): a callable or an object with
        ``run(group) -> bool`` seeing a ``SampleGroup``, or a built-in op (``ingest.ops.FilterOP``,
        ``DenseToSparseOP``, ``DebugOP``).  Ops run in the order added, before the DSL features."""
        return self._set(ops=self._options.ops + (as_op(op),))

    def keep_sample(self, on=True) -> "DataReader":
        """XDL's iterative loop: a group the consumer is done with (next iteration or ``batch.release()``)
        goes back through the ops, pass after pass, until an op drops it (docs/ops.md)."""
        return self._set(keep=_flag("keep_sample", on))

    def pause(self, n, wait_exactly=False) -> "DataReader":
        """Read in rounds of ``n`` sample groups: reading stops once ``n`` groups are live (admitted and not
        yet done with, or with ``keep_sample`` not yet dropped by an op) and goes on when every one has
        left (``wait_exactly=True``) or as soon as fewer than ``n`` are live.  A partial batch is delivered
        as soon as nothing else could complete it."""
        return self._set(pause=(_positive_int("pause", n), _flag("wait_exactly", wait_exactly)))

    def split_group(self, on=True) -> "DataReader":
        return self._set(split_group=_flag("split_group", on))

    def pad(self, on=True) -> "DataReader":
        """Pad every short batch to ``batch_size`` rows (empty sparse rows, zero dense rows and labels)."""
        return self._set(pad=_flag("pad", on))

    def drop_last(self, on=True) -> "DataReader":
        return self._set(drop_last=_flag("drop_last", on))

    def shard(self, task_index, task_num) -> "DataReader":
        """Read only this worker's share: work units ``task_index, task_index + task_num, ...``."""
        self._option()
        task_num = _positive_int("task_num", task_num)
        return self._set(task=(_positive_int("task_index", task_index, 0, task_num - 1), task_num))

    def on_error(self, policy) -> "DataReader":
        """``"raise"`` (default) stops at the first bad line; ``"skip"`` skips and counts it."""
        self._option()
        if policy not in _POLICIES:
            raise ConfigError(f"on_error={policy!r}: expected one of {_POLICIES}")
        return self._set(policy=policy)

    def max_group_size(self, n) -> "DataReader":
        """Text: most samples in one group; the next line starts a new group (default 8192).

        A pb group is one record, whatever its size."""
        return self._set(max_group_size=_positive_int("max_group_size", n))

    def max_record_bytes(self, n) -> "DataReader":
        """pb/spb: longest record accepted (default 64 MiB); a longer length prefix is an error."""
        return self._set(max_record_bytes=_positive_int("max_record_bytes", n))

    def z(self, codec) -> "DataReader":
        """Force a compression codec for every path (``gzip``, ``zstd``, ``zlib``, ``lz4``; None infers)."""
        return self._set(compression=check_codec(codec))

    def deterministic(self, on=True) -> "DataReader":
        """Deliver samples in input order whatever the thread timing (slower with several threads)."""
        return self._set(deterministic=_flag("deterministic", on))

    def unique_ids(self, on=True) -> "DataReader":
        """Per batch and sparse feature: ``unique_ids``, ``inverse``; ``unique_rows`` and their offsets when read."""
        return self._set(unique=_flag("unique_ids", on))

    def kafka(
        self, group_id=None, start="earliest", until="caught_up", client="direct", **consumer_config
    ) -> "DataReader":
        """Kafka settings for ``kafka://`` paths: where partitions start (``"earliest"``, ``"latest"`` or a
        timestamp in ms), where they end (``"caught_up"``: the end offsets seen at startup, or
        ``"forever"``), and kafka-python consumer settings.

        With ``group_id`` and topic URLs (``kafka://brokers/topic``) the reader joins the consumer group: the
        group's coordinator assigns it partitions and moves them as readers come and go; revoked partitions
        are drained and committed before they move, and ``commit()`` commits what was delivered
        (docs/state.md).  With the partitions named in the URL (``topic:0,2``) the assignment is fixed:
        partitions start at the group's committed positions and ``state()`` commits the delivered ones.
        Either way a partition starts exactly where ingest's last commit left it.

        ``client="direct"`` fetches over ingest's own sockets (TLS, SASL PLAIN / SCRAM, either isolation
        level; kafka-python's setting names, from the environment or ``security_file=`` too: README);
        ``"kafka-python"`` through kafka-python's consumer, for other SASL mechanisms (fixed assignments only)."""
        options = source_for("kafka://").options(
            group_id=group_id, start=start, until=until, client=client, **consumer_config
        )
        return self._set(sources={**self._options.sources, "kafka": options})

    def timeline(self, path, max_file_mb=100) -> "DataReader":
        """Record a Chrome trace of the run (a track per thread, an event per chunk, op and batch), written to
        ``path`` as it goes (JSON array format, ``]`` added when the input is exhausted or the reader shuts
        down), the next file (``<stem>.1<ext>``...) started before one would pass ``max_file_mb`` MB."""
        self._option()
        check_writable(str(path), "timeline")
        return self._set(timeline_path=str(path), timeline_mb=file_mb(max_file_mb, "timeline"))

    def trace(self, writer, arrays=("labels",), every=1) -> "DataReader":
        """For each batch the consumer takes, write to ``writer`` (a ``TraceWriter``) the ``arrays`` named (keys of
        ``Batch.arrays()``) and the sample ids (``sample_ids``, ``sample_ids.offsets``) at ``lstep``, the batch's
        number (a restored reader counts on), if a multiple of ``every`` (docs/trace.md)."""
        self._option()
        self._trace = BatchTrace(writer, arrays, every)
        return self

    def set_global_step(self, n) -> None:
        """The trainer's global step of the next batch taken; the batches after it count on from ``n``."""
        if self._trace is None:
            raise ConfigError(f"reader {self.name!r}: set_global_step() traces the global step; call trace() first")
        self._trace.global_step(n)

    def prefetch(self, n) -> "DataReader":
        """Batches built ahead of the consumer (default 8 a parse thread: 16 with ``threads(2)``)."""
        return self._set(prefetch=_positive_int("prefetch", n))

    def unit_bytes(self, n) -> "DataReader":
        """Size of the byte ranges large uncompressed files are cut into (default: automatic)."""
        return self._set(unit_bytes=_positive_int("unit_bytes", n, 1024))

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def schema(self):
        return Schema(self._options.specs, self._options.label_count)

    def startup(self) -> "DataReader":
        """List the inputs, plan the work units of this shard and start the threads."""
        o = self._options
        self._option()
        if o.paths is None:
            raise ConfigError(f"reader {self.name!r}: paths=None, expected files, directories, globs or URLs")
        if not o.specs and o.label_count == 0:
            raise ConfigError(f"reader {self.name!r}: nothing to read, declare a feature or label_count >= 1")
        on_skip = self._stats.skipped if o.policy == "skip" else None
        schema = self.schema
        options = {"on_skip": on_skip}
        if o.file_type is formats.FileType.txt:
            if o.max_record_bytes is not None:
                raise ConfigError("max_record_bytes applies to pb and spb files, not txt")
            options["max_group_size"] = o.max_group_size
        elif o.max_record_bytes is not None:
            options["max_record_bytes"] = o.max_record_bytes
        fmt = formats.make_format(o.file_type, schema.raw, **options)
        self._member = self._join_group()
        if self._member is not None:  # units come as the group assigns partitions
            mine = []
            self._progress = Progress([])
        elif o.units is not None:
            mine = list(o.units)
        else:
            mine = self._plan_units(fmt)[o.task[0] :: o.task[1]]
        self._units = mine
        if o.restored is not None:
            self._progress = state_format.check(o.restored, self.name, self._state_options(), mine)
        elif o.enable_state:
            self._progress = Progress([u.index for u in mine])
        rounds = self._rounds()
        by_source = self._by_source(mine)
        for source, settings, units in by_source:
            source.check(units, settings, o, self.name)
        if self._progress is not None:
            made = (source.committer(units, settings) for source, settings, units in by_source)
            self._committers = [c for c in made if c is not None]
        dsl = dsl_stage(schema)
        builder = BatchBuilder(
            schema,
            o.batch_size,
            o.pad,
            unique=o.unique,
            stats=self._stats,
            track=self._progress is not None,
            keep_pieces=rounds is not None,
            pool=self._buffers,
            kernels_ready=warmup.for_reader(
                schema, o.file_type is formats.FileType.txt, o.batch_size, o.pad, o.unique, dsl is not None
            ),
        )
        ops = OpStage(schema.raw, o.ops) if o.ops else None  # checks built-in ops against the schema
        # with units that come and go (a consumer group) or never end no epoch ends
        live = any(source.live(settings) for source, settings, _ in by_source)
        self._coverage = Coverage(schema.raw, len(mine), schema.by_name) if self._member is None and not live else None
        stages = Stages(
            fmt,
            builder,
            ops=ops,
            dsl=dsl,
            rounds=rounds,
            coverage=self._coverage,
            group_shuffle=self._group_shuffle(live, rounds),
            on_skip=on_skip,
        )
        flow = Flow(
            threads=o.threads,
            epochs=o.epochs,
            deterministic=o.deterministic,
            split_group=o.split_group,
            drop_last=o.drop_last,
            prefetch=o.prefetch,
            shuffle=o.shuffle,
            live=live,
        )
        self._pipeline = runner_for(mine, stages, flow, self._stats, progress=self._progress, unit_source=self._member)
        self._started = True
        if o.timeline_path is not None:
            self._stats.timeline = Timeline(o.timeline_path, o.timeline_mb)
        if self._trace is not None and self._progress is not None:  # a restored reader's steps count on
            self._trace.next_step = self._progress.batches
        self._stats.start_clock()
        self._pipeline.start()
        if self._member is not None:
            self._member.start(PipelineDelivery(self._pipeline))
        self._finalizer = weakref.finalize(self, _close, self._pipeline, self._member, self._committers, self._stats)
        return self

    def _group_shuffle(self, live, rounds):
        """The GroupShuffle of ``shuffle(seed, buffer=n)``, or None; refuses what cannot follow one ordered
        stream of windows."""
        o = self._options
        if o.shuffle_buffer is None:
            return None
        if live or rounds is not None:
            raise ConfigError(
                f"reader {self.name!r}: shuffle(buffer=...) needs an input that ends and one pass "
                f"per group: not with units without end (until='forever'), keep_sample or pause"
            )
        resume = self._progress.window if self._progress is not None else None
        return GroupShuffle(o.shuffle_buffer, o.shuffle, resume)

    def _by_source(self, units):
        """``[(source, its options, its units)]`` of ``units``."""
        found = {}
        for u in units:
            source = source_for(u.url)
            found.setdefault(id(source), (source, self._options.sources.get(scheme_of(u.url)), []))[2].append(u)
        return list(found.values())

    def _join_group(self):
        """The unit source of a group that assigns this reader its units (``kafka(group_id=...)`` on topic URLs),
        or None."""
        o = self._options
        paths = [o.paths] if isinstance(o.paths, str) else list(o.paths)
        sources = {id(source): source for source, _, _ in sources_of(paths)}.values()
        members = [m for source in sources if (m := source.member(paths, o, self.name)) is not None]
        return members[0] if members else None

    def _rounds(self):
        """The Rounds of ``keep_sample`` / ``pause``, or None; checks what they cannot be combined with."""
        o = self._options
        if not o.keep and o.pause is None:
            return None
        if o.keep and not o.ops:
            raise ConfigError(
                f"reader {self.name!r}: keep_sample(True) needs an op that drops groups (add_op); "
                f"without one no group would ever leave"
            )
        if o.keep and self._progress is not None:
            raise ConfigError(
                f"reader {self.name!r}: keep_sample(True) with enable_state=True is not available: "
                f"the state would have to hold every live group"
            )
        if o.deterministic:
            raise ConfigError(f"reader {self.name!r}: keep_sample / pause with deterministic=True is not available")
        limit, exactly = o.pause if o.pause is not None else (None, False)
        return Rounds(o.keep, limit, exactly, o.threads)

    def _plan_units(self, fmt):
        """Work units of every path in order, each planned by its source."""
        o = self._options
        return plan_paths(
            o.paths,
            splittable=fmt.splittable,
            compression=o.compression,
            task_num=o.task[1],
            unit_bytes=o.unit_bytes,
            options=o.sources,
        )

    def __iter__(self) -> "DataReader":
        return self

    def __next__(self) -> Batch:
        if self._pipeline is None:
            raise ReaderClosedError(f"reader {self.name!r}: call startup() before iterating")
        # the consumer is back for more: what it was handed so far is done with
        every = self._options.save_every
        if every is not None and self._progress.batches - self._saved_at >= every[0]:
            self._save()
        try:
            batch = self._pipeline.next_batch()
        except StopIteration:
            self._report_unseen()
            if self._options.save_every is not None:
                self._save()
            if self._member is not None:  # every partition caught up: commit and leave the group
                self._member.close()
            self._report_skipped()
            self._stats.end_timeline()
            trim_frame_buffers()
            raise
        if self._coverage is not None and self._coverage.epochs_ended:
            self._report_unseen()
        if self._trace is not None:
            self._trace.took(batch)
        return batch

    # -- state -----------------------------------------------------------------------------
    def _state_options(self):
        """What fixes the sequence of samples: a state resumes only a reader with the same."""
        o = self._options
        options = {
            "file_type": o.file_type.name,
            "shard": list(o.task),
            "epochs": o.epochs,
            "split_group": o.split_group,
            "shuffle": o.shuffle,
        }
        if o.shuffle_buffer is not None:
            options["shuffle_buffer"] = o.shuffle_buffer
        if o.file_type is formats.FileType.txt:
            options["max_group_size"] = o.max_group_size
        for source, scheme, _ in sources_of(o.paths):
            options.update(source.state_options(o.sources.get(scheme)))
        return options

    def state(self) -> bytes:
        """The position after the last sample handed to the consumer, as bytes (docs/state.md).

        Needs ``enable_state=True`` and ``startup()``.  Costs no pipeline drain: it describes what
        was delivered, whatever the threads have read ahead; it may be taken from any thread.  With
        ``kafka(group_id=...)`` and partitions named in the URLs the Kafka positions are also committed to the
        group (a group member has no state: ``commit()``)."""
        if self._member is not None:
            raise ConfigError(
                f"reader {self.name!r}: a consumer group member has no state of its own: its positions "
                f"are the group's commits (reader.commit())"
            )
        if self._progress is None:
            raise ConfigError(f"reader {self.name!r}: state() needs enable_state=True and startup()")
        if self._state_header is None:
            self._state_header = state_format.header(self.name, self._state_options(), self._units)
        progress = self._progress.snapshot()
        data = state_format.encode(self._state_header, progress)
        for committer in self._committers:
            committer.commit(progress)
        return data

    def commit(self) -> None:
        """Commit to the Kafka consumer group of ``kafka(group_id=...)`` what the consumer was handed: per
        partition the message offset, with ``ingest:<byte in message>:<rows>`` as metadata when a message was
        delivered in part (docs/state.md).  A group member also commits when partitions are revoked, at the
        end of the input and at ``shutdown()``."""
        if self._member is not None:
            self._member.commit()
        elif self._committers:
            progress = self._progress.snapshot()
            for committer in self._committers:
                committer.commit(progress)
        else:
            raise ConfigError(
                f"reader {self.name!r}: commit() needs kafka(group_id=...), and enable_state=True "
                f"when the URLs name partitions, and startup()"
            )

    def restore(self, state) -> "DataReader":
        """Continue from ``state`` (bytes of ``state()``) at ``startup()``: no sample delivered before it
        is delivered again, none after it is lost.  Paths and options must be the same."""
        return self._set(restored=state_format.decode(state), enable_state=True)

    def save_state_every(self, n_batches, url) -> "DataReader":
        """Write ``state()`` to ``url`` (any fsspec URL, replaced atomically) every ``n_batches`` batches,
        when the consumer asks for the next one (so the state covers the batches it has finished
        with), and at the end of the input."""
        if not isinstance(url, (str, os.PathLike)):
            raise ConfigError(f"save_state_every url={url!r}: expected a path or URL (str)")
        check_writable(os.fspath(url), "save_state_every")
        return self._set(save_every=(_positive_int("n_batches", n_batches), os.fspath(url)), enable_state=True)

    def restore_from(self, url, missing_ok=False) -> "DataReader":
        """``restore()`` from a state saved at ``url``; with ``missing_ok`` a missing file starts afresh."""
        data = state_format.read(url, missing_ok)
        if data is None:
            self._option()
            return self
        return self.restore(data)

    def _save(self):
        state_format.write_atomic(self._options.save_every[1], self.state())
        self._saved_at = self._progress.batches

    def read_all(self) -> list:
        """All remaining batches as a list (for small inputs and tests)."""
        return list(self)

    def _report_skipped(self):
        stats = self._stats.snapshot()
        if stats["errors_skipped"]:
            warnings.warn(
                f"reader {self.name!r}: skipped {stats['errors_skipped']} bad lines or records; "
                f"first: {stats['first_errors'][0]}",
                RuntimeWarning,
                stacklevel=3,
            )

    def _report_unseen(self):
        if self._coverage is not None:
            self._coverage.warn_unseen(self.name, self._units, self._options.file_type)

    def stats(self) -> dict:
        """Counters (bytes, samples, groups, blocks, batches, units, errors_skipped) and seconds per stage.

        Stages: ``read`` (reading and decompressing, or waiting for the read-ahead thread), ``parse``,
        ``ops`` (DSL), ``batch`` and ``unique``, summed over the parse workers, whose batches count their unique
        ids in ``batch`` (``batch`` on the batcher thread and ``unique`` on the unique-id thread where batches follow
        one block stream: README, ``threads(n)``);
        ``wait``, the time the consumer waited for a batch; and ``wall`` since ``startup()``.
        ``features_never_seen``: declared features no epoch that ended so far held (a warning names each)."""
        out = self._stats.snapshot()
        never = self._coverage.never_seen if self._coverage is not None else None
        out["features_never_seen"] = list(never or [])
        return out

    def shutdown(self) -> None:
        """Stop the threads (also when the consumer stopped early); the reader cannot be restarted."""
        if self._pipeline is not None:
            committers, self._committers = self._committers, []
            _close(self._pipeline, self._member, committers, self._stats)
            trim_frame_buffers()  # not in _close: a finalizer may run amid a lease, which holds the pool's lock
        if self._finalizer is not None:
            self._finalizer.detach()

    def __enter__(self) -> "DataReader":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
