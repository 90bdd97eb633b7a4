"""Conversion between sample formats (``ingest convert``, docs/formats.md, command line).

text -> pb writes each sample group as one ``SampleGroup`` with structured compression:
the aux features (named, or chosen automatically from a leading sample) go to table 1,
one line per distinct aux content of the group, and every sample refers to its line.
text -> spb writes one ``SampleSimple`` per sample.  pb/spb -> text expands aux lines back.

Text input is first scanned for every feature name (so no feature is lost), then cut into
byte ranges that threads parse and encode (numba kernels, the GIL released) while the
writer appends their records in input order; at most ``2 * threads`` ranges are in
flight, so memory does not grow with the input.  Outputs are written under a temporary
name and renamed when complete.  Parquet (``parquet.py``) is written from a reader's batches and
read into Blocks of one table that the text and pb/spb writers take.
"""

import concurrent.futures
import contextlib
import os
import tempfile
import uuid

import numpy as np

from ._native.encode import identical_features
from ._native.text_write import TextLayout, TextRows, write_text_rows
from .discover import scan_features
from . import warmup
from .errors import ConfigError, DataError, SourceError
from .features import DenseLayout, Schema, make_feature
from .formats import FileType, format_of
from .formats.encoding import RecordEncoder, byte_blob
from .formats.protobuf import ProtobufFormat
from .formats.text import TextFormat
from .optional import require
from .blocks import placeholder_block
from .parquet import Parquet, format_or_parquet, parquet_blocks, refuse_compressed, scan_parquet, write_parquet
from .produce import is_topic, produce
from .sources import expand_paths, plan_units
from .sources.compression import compressed_writer, infer_compression, strip_suffix
from .sources.filesystems import check_writable, url_to_fs

__all__ = ["choose_aux", "convert", "LEAD_BYTES"]

LEAD_BYTES = 4 << 20  # leading sample read by --aux auto
SCHEDULER_TIMEOUT = 8  # seconds to wait for a Dask scheduler to answer


# -- text -> pb: the aux choice ----------------------------------------------------------------
def choose_aux(url, features, lead_bytes=LEAD_BYTES):
    """Features identical across the samples of every multi-sample group in the first ``lead_bytes``.

    A feature qualifies when it has values in at least one multi-sample group of the lead
    and never differs inside one.  Returns the names, sparse then dense, in input order.
    """
    schema = features.schema()
    unit = plan_units(expand_paths([url])[:1], splittable=False)[0]
    identical = _Identical(schema)
    read = 0
    for blk in TextFormat(schema).read_unit(unit):
        identical.add(blk)
        read += blk.nbytes
        if read >= lead_bytes:
            break
    return identical.names()


class _Identical:
    """Which features have values in a multi-sample group and never differ inside one, over the text Blocks
    it is shown."""

    def __init__(self, schema):
        self.schema = schema
        self.layout = DenseLayout(schema.dense)
        self.differs = np.zeros(len(schema.sparse) + len(schema.dense), np.bool_)
        self.present = np.zeros_like(self.differs)

    def add(self, blk):
        table = blk.tables[0]
        dense = np.hstack(table.dense) if table.dense else np.zeros((blk.nrows, 0), np.float32)
        identical_features(
            blk.group_offsets,
            table.sp_offsets,
            blk.sp_keys,
            blk.sp_values,
            dense,
            self.layout.first_col,
            self.layout.width,
            self.differs,
            self.present,
        )

    def names(self):
        """The features identical in every group so far, sparse then dense, in input order."""
        keep = self.present & ~self.differs
        names = [s.name for s in self.schema.sparse] + [s.name for s in self.schema.dense]
        return [n for n, k in zip(names, keep) if k]


# -- writing ------------------------------------------------------------------------------------
class _AtomicWriter:
    """A file written under a temporary name in the same directory, renamed on ``commit()``."""

    def __init__(self, url):
        self.url = url
        self.fs, self.path = url_to_fs(url)
        parent, name = os.path.split(self.path)
        self.tmp = os.path.join(parent, f".{name}.{uuid.uuid4().hex[:8]}.tmp")
        if parent:
            self.fs.makedirs(parent, exist_ok=True)
        self.raw = self.fs.open(self.tmp, "wb")
        try:
            self.f = compressed_writer(self.raw, infer_compression(url))
        except ConfigError as exc:
            self.abort()
            raise ConfigError(f"{url}: {exc}") from None
        self.bytes = 0

    def write(self, data):
        self.f.write(memoryview(data))
        self.bytes += len(data)

    def commit(self):
        if self.f is not self.raw:
            self.f.close()
        self.raw.close()
        self.fs.mv(self.tmp, self.path)

    def abort(self):
        try:
            self.raw.close()
            self.fs.rm(self.tmp)
        except OSError:
            pass


def _text_to_records(units, schema, aux, simple, threads, write, progress=None):
    """Parse and encode text units on ``threads`` threads; ``write`` gets the records in input order,
    ``progress.update`` the bytes of each unit converted."""
    fmt = TextFormat(schema)
    encoder = RecordEncoder(schema, set(aux), simple)

    def work(unit):
        parts, nbytes = [], 0
        for blk in fmt.read_unit(unit):
            parts += encoder.encode(blk)
            nbytes += blk.nbytes
        return parts, nbytes

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        pending = []
        it = iter(units)
        for unit in it:
            pending.append(pool.submit(work, unit))
            if len(pending) >= 2 * threads:
                break
        while pending:
            parts, nbytes = pending.pop(0).result()
            for part in parts:
                write(part)
            if progress is not None:
                progress.update(nbytes)
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.submit(work, nxt))


# -- pb/spb -> text -------------------------------------------------------------------------------
class _TextWriter:
    """Writes decoded pb/spb Blocks as text lines, aux lines expanded back into every sample."""

    def __init__(self, schema):
        self.schema = schema
        sp_name, sp_name_off = byte_blob([s.name.encode() for s in schema.sparse])
        dn_name, dn_name_off = byte_blob([s.name.encode() for s in schema.dense])
        dense_layout = DenseLayout(schema.dense)
        self.layout = TextLayout(
            sp_name=sp_name,
            sp_name_off=sp_name_off,
            dn_name=dn_name,
            dn_name_off=dn_name_off,
            dn_base=dense_layout.first_col,
            dn_width=dense_layout.width,
        ).checked()
        # each feature's position among its table's features of its kind (names are unique)
        self.place = {
            s.name: j
            for t in range(schema.tables)
            for specs in (schema.sparse_in(t), schema.dense_in(t))
            for j, s in enumerate(specs)
        }
        self.out = np.empty(1 << 22, np.uint8)

    def write(self, blk, first_group, write):
        """Write the samples of ``blk``, group ids numbered from ``first_group`` (empty for one-sample groups);
        returns the groups written."""
        schema, place = self.schema, self.place
        n = blk.nrows
        rows = [np.arange(n, dtype=np.int64)]
        for t in range(schema.tables - 1):
            rows.append(blk.tables[t].refer[rows[-1]])
        starts = np.empty((len(schema.sparse), n), np.int64)
        ends = np.empty((len(schema.sparse), n), np.int64)
        for f, spec in enumerate(schema.sparse):
            off = blk.tables[spec.table].sp_offsets[place[spec.name]]
            starts[f] = off[rows[spec.table]]
            ends[f] = off[rows[spec.table] + 1]
        dense = (
            np.hstack([blk.tables[s.table].dense[place[s.name]][rows[s.table]] for s in schema.dense])
            if schema.dense
            else np.zeros((n, 0), np.float32)
        )
        sizes = np.diff(blk.group_offsets)
        numbers = np.where(sizes > 1, first_group + np.arange(len(sizes)), -1)
        gid = np.repeat(numbers, sizes).astype(np.int64)
        rows = TextRows(
            sid_bytes=blk.sid_bytes,
            sid_off=blk.sid_offsets,
            gid=gid,
            starts=starts,
            ends=ends,
            keys=blk.sp_keys,
            values=blk.sp_values,
            dense=dense,
            labels=blk.labels,
            timestamps=blk.timestamps,
        ).checked()
        r = 0
        while r < n:
            r2, pos = write_text_rows(r, n, rows, self.layout, self.out, 0)
            if r2 == r:
                self.out = np.empty(2 * len(self.out), np.uint8)  # one line longer than the buffer
                continue
            write(self.out[:pos])
            r = r2
        return len(sizes)


def _records_to_text(unit, schema, simple, write, first_group, progress=None):
    """Write the samples of a pb/spb unit as text lines; returns the groups written."""
    writer = _TextWriter(schema)
    group = first_group
    for blk in ProtobufFormat(schema, simple=simple).read_unit(unit):
        if blk.sp_hkeys is not None and blk.sp_hkeys.any():
            raise DataError(
                "a 128-bit id (hkey != 0) has no text form;",
                source=unit.url,
                offset=blk.start,
                text="",
                expected="64-bit ids (hkey 0) for text output",
                kind="HKEY",
            )
        group += writer.write(blk, group, write)
        if progress is not None:
            progress.update(blk.nbytes)
    return group - first_group


def _blocks_to_records(blocks, schema, dst, write):
    """Write Blocks of one table and one sample per group (``parquet_blocks``) as text lines or pb/spb records."""
    if dst is FileType.txt:
        writer, group = _TextWriter(schema), 0
        for blk in blocks:
            group += writer.write(blk, group, write)
        return
    encoder = RecordEncoder(schema, set(), dst is FileType.spb)
    for blk in blocks:
        for part in encoder.encode(blk):
            write(part)


# -- compiling ahead ----------------------------------------------------------------------------------
# The kernels that write one format and read the other compile side by side (``warmup.compile_ahead``): their
# arrays have the same types whatever the features, so a small schema of every kind stands in for the input's.
_WARM_TEXT = Schema([make_feature("s", "sparse"), make_feature("d", "dense", nvec=2)], 1)
_WARM_PB = Schema([*_WARM_TEXT.specs, make_feature("u", "sparse", table=1)], 1)


def _warm_text_writer():
    _TextWriter(_WARM_PB).write(placeholder_block(_WARM_PB), 0, lambda _: None)


def _one_record(simple, folder):
    """The work unit of a file in ``folder`` holding one record (a ``SampleSimple`` when ``simple``) written by
    protobuf's own module."""
    from .sample_pb2 import SampleGroup, SampleSimple

    if simple:
        record = SampleSimple(
            sample_id="a",
            label={"values": [1.0]},
            feature_line={"features": [{"type": 1, "name": "s", "values": [{"key": 1}]}]},
        )
    else:
        record = SampleGroup(
            sample_ids=["a"],
            labels=[{"values": [1.0]}],
            feature_tables=[
                {
                    "feature_lines": [
                        {
                            "features": [
                                {"type": 1, "name": "s", "values": [{"key": 1, "value": 2.0}]},
                                {"type": 2, "name": "d", "values": [{"vector": [1.0, 2.0]}]},
                            ],
                            "refer": 0,
                        }
                    ]
                },
                {"feature_lines": [{"features": [{"type": 1, "name": "u", "values": [{"key": 3}]}]}]},
            ],
        )
    data = record.SerializeToString()
    path = os.path.join(folder, "one.pb")
    with open(path, "wb") as f:
        f.write(len(data).to_bytes(4, "little") + data)
    return plan_units([(path, len(data) + 4)])[0]


def warm_decoder(payload):
    """Compile the pb/spb decoder (``payload["simple"]``: spb) on one record."""
    simple = payload["simple"]
    with tempfile.TemporaryDirectory(prefix="ingest-warm-") as tmp:
        schema = _WARM_TEXT if simple else _WARM_PB
        for _ in ProtobufFormat(schema, simple=simple).read_unit(_one_record(simple, tmp)):
            pass


def warm_text_side(payload):
    """Compile what a pb/spb -> text conversion needs besides the decoder: the scan of the records' features and
    the text writer (``payload["simple"]``: spb)."""
    simple = payload["simple"]
    with tempfile.TemporaryDirectory(prefix="ingest-warm-") as tmp:
        scan_features([_one_record(simple, tmp)], FileType.spb if simple else FileType.pb)
    _warm_text_writer()


def warm_encoder(payload):
    """Compile the pb/spb encoder and ``--aux auto``'s comparison (``payload["simple"]``: spb)."""
    blk = placeholder_block(_WARM_TEXT)
    RecordEncoder(_WARM_TEXT, {"d"}, payload["simple"]).encode(blk)
    _Identical(_WARM_TEXT).add(blk)


def _compile_side_by_side(src, dst):
    """Announce the kernels a conversion compiles and, when both sides are cold, have a second process compile
    some of them (text -> pb: the encoder, which comes later; pb -> text: the feature scan and the text writer,
    while this one compiles the decoder, the longest, so that the second process's start is not on the way);
    returns what to wait for before converting."""
    reading = "text" if src is FileType.txt else "pb"
    writing = "write-pb" if dst is not FileType.txt else "write-text"
    groups = [f"scan-{reading}", reading, writing]
    cold = warmup.cold(groups)
    if reading not in cold or writing not in cold:
        warmup.notice(groups)
        return lambda: None
    simple = FileType.spb in (src, dst)
    if src is FileType.txt:
        warmup.notice(groups, parallel=[writing])
        return warmup.compile_ahead("ingest.convert:warm_encoder", {"simple": simple}).wait
    warmup.notice(groups, parallel=[groups[0], writing])
    ahead = warmup.compile_ahead("ingest.convert:warm_text_side", {"simple": simple})
    warm_decoder({"simple": simple})
    return ahead.wait


# -- driver -----------------------------------------------------------------------------------------
def _output_plan(inputs, output, dst):
    """``[(input files, output url)]``: one output file, or one per input file in a directory."""
    fs, path = url_to_fs(output)
    is_dir = (
        output.endswith("/")
        or (fs.exists(path) and fs.isdir(path))
        or (len(inputs) > 1 and not os.path.splitext(path)[1])
    )
    if not is_dir:
        return [(inputs, output)]
    plan = []
    for url, size in inputs:
        name = strip_suffix(url.rstrip("/").rsplit("/", 1)[-1])
        stem = name.rsplit(".", 1)[0] if "." in name else name
        plan.append(([(url, size)], output.rstrip("/") + "/" + stem + "." + dst.value))
    return plan


def convert(inputs, output, *, src=None, dst=None, aux=None, threads=None, scheduler=None, log=print, progress=None):
    """Convert sample files; returns a summary dict (inputs, outputs, aux features, bytes).

    Parameters
    ----------
    inputs : list of str
        Files, directories, globs or URLs, all of one format.
    output : str
        A file (all inputs, in order), a directory (one file per input, named after it), or a
        ``kafka://`` topic (staged in a temporary local file, then sent as ``ingest produce`` does;
        ``dst`` defaults to pb).
    src, dst : str or None
        Formats; inferred from the names when None.
    aux : None, "auto" or list of str
        text -> pb only: the features stored once per group in table 1.
    threads : int
        Parse/encode threads (default: the CPU count).
    scheduler : str or None
        Address of a Dask scheduler: the output files are written by its workers.
    progress : object with ``update(n)`` and ``total``, or None
        Told of the input bytes converted as they are (a tqdm bar; not with a scheduler).  ``total`` is set to
        the input bytes when no input is compressed.
    """
    if is_topic(output):  # staged in a local file, then sent whole groups or records per message
        with tempfile.TemporaryDirectory(prefix="ingest-convert-") as tmp:
            dst = format_of("x.pb", dst)
            staged = os.path.join(tmp, f"staged.{dst.value}")
            summary = convert(inputs, staged, src=src, dst=dst, aux=aux, threads=threads, scheduler=scheduler, log=log)
            summary["kafka"] = produce([staged], output, dst.value, log=log)
            summary["outputs"] = [output]
            return summary
    files = expand_paths(inputs)
    src = format_or_parquet(files[0][0], src)
    dst = format_or_parquet(output, dst)
    if src == dst:
        raise ConfigError(f"--from and --to are both {src.value}: nothing to convert")
    if aux and (src is not FileType.txt or dst is not FileType.pb):
        raise ConfigError("--aux applies to text -> pb only")
    plan = _output_plan(files, output, dst)
    for _, out in plan:  # before anything is read
        check_writable(out, "output")
        if dst is Parquet.parquet:
            refuse_compressed(out)
    with _dask_client(scheduler) if scheduler else contextlib.nullcontext() as client:
        threads = threads or os.cpu_count() or 1
        summary = {"from": src.value, "to": dst.value, "inputs": [u for u, _ in files], "aux": []}
        if src is Parquet.parquet:
            warmup.notice(["write-text" if dst is FileType.txt else "write-pb"])
            kernels_ready, features = (lambda: None), scan_parquet(files)
        else:  # to Parquet: the reader announces and compiles its kernels
            kernels_ready = _compile_side_by_side(src, dst) if dst is not Parquet.parquet else (lambda: None)
            features = scan_features(plan_units(files, splittable=False), src, threads)
        if features.label_count != features.max_labels:
            raise DataError(
                f"samples have {features.label_count} to {features.max_labels} labels;",
                source=files[0][0],
                offset=0,
                text="",
                kind="TOO_FEW_LABELS",
                expected="the same number of labels in every sample: a converted file has one label "
                "count, so extra labels would be lost",
            )
        if src is FileType.txt:
            if aux == "auto":
                aux = choose_aux(files[0][0], features)
            elif aux:
                known = {name for name, *_ in features.declarations()}
                missing = [a for a in aux if a not in known]
                if missing:
                    raise ConfigError(
                        f"--aux {','.join(missing)}: no such feature in the input; it has {', '.join(sorted(known))}"
                    )
            aux = list(aux or [])
            summary["aux"] = aux
            summary["features"] = {"declared": features.declarations(), "label_count": features.label_count}
            if dst is FileType.pb:
                log(f"aux features (table 1): {', '.join(aux) if aux else '(none)'}")
        kernels_ready()
        job = dict(src=src, dst=dst, aux=aux, features=features, threads=threads)
        if client is not None:
            futures = client.map(lambda item: _convert_one(item[0], item[1], **job), plan, pure=False)
            results = client.gather(futures)
        else:
            if progress is not None and not any(infer_compression(url) for url, _ in files):
                progress.total = sum(size or 0 for _, size in files)
            results = [_convert_one(ins, out, **job, progress=progress) for ins, out in plan]
    summary["outputs"] = [r[0] for r in results]
    summary["bytes_out"] = sum(r[1] for r in results)
    summary["bytes_in"] = sum(s or 0 for _, s in files)
    return summary


def _dask_client(address):
    """A Dask client of the scheduler at ``address``; a ``SourceError`` when none answers within
    ``SCHEDULER_TIMEOUT`` seconds."""
    client_class = require("dask.distributed", "distributed", "dask").Client
    try:
        return client_class(address, timeout=SCHEDULER_TIMEOUT)
    except (OSError, ValueError) as exc:
        raise SourceError(
            f"--scheduler {address}: no Dask scheduler answered within {SCHEDULER_TIMEOUT} s "
            f"({' '.join(str(exc).split())})",
            source=address,
        ) from exc


def _convert_one(files, output, *, src, dst, aux, features, threads, progress=None):
    """Write one output file from ``files``; returns ``(url, bytes written before compression)``."""
    writer = _AtomicWriter(output)
    try:
        if dst is Parquet.parquet:
            write_parquet(files, src, features, threads, writer.write, progress)
        elif src is Parquet.parquet:
            _blocks_to_records(parquet_blocks(files, features.schema(), progress), features.schema(), dst, writer.write)
        elif src is FileType.txt:
            units = plan_units(files, splittable=True, task_num=threads)
            _text_to_records(
                units, features.schema(), aux, dst is FileType.spb, threads, writer.write, progress=progress
            )
        elif dst is FileType.txt:
            group = 0
            for unit in plan_units(files, splittable=False):
                group += _records_to_text(unit, features.schema(), src is FileType.spb, writer.write, group, progress)
        else:
            raise ConfigError(f"{src.value} -> {dst.value}: convert through text (txt)")
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    return output, writer.bytes
