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

import numpy as np

from ._native.encode import identical_features
from ._native.text_write import TextLayout, TextRows, write_text_rows
from .discover import scan_features
from . import warmup
from .errors import ConfigError, DataError
from .features import DenseLayout, Schema, make_feature
from .formats import FileType, format_of
from .formats.encoding import RecordEncoder, byte_blob
from .formats.protobuf import ProtobufFormat
from .formats.text import TextFormat
from .blocks import placeholder_block
from .parquet import Parquet, format_or_parquet, parquet_blocks, refuse_compressed, scan_parquet, write_parquet
from .parts import AtomicWriter, dask_client, output_parts, run_on_cluster, write_manifest
from .produce import is_topic, produce
from .sources import expand_paths, plan_units
from .sources.compression import infer_compression
from .sources.filesystems import check_writable

__all__ = ["choose_aux", "convert", "LEAD_BYTES"]

LEAD_BYTES = 4 << 20  # leading sample read by --aux auto
MIB = 1 << 20


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


# -- text -> pb/spb -------------------------------------------------------------------------------
def _text_to_records(units, schema, aux, simple, threads, write, counts, progress=None):
    """Parse and encode text units on ``threads`` threads; ``write`` gets the records in input order, ``counts``
    (a dict) adds up their ``samples`` and ``groups``, ``progress.update`` the bytes of each unit converted."""
    fmt = TextFormat(schema)
    encoder = RecordEncoder(schema, set(aux), simple)

    def work(unit):
        parts, nbytes, samples, groups = [], 0, 0, 0
        for blk in fmt.read_unit(unit):
            parts += encoder.encode(blk)
            nbytes, samples, groups = nbytes + blk.nbytes, samples + blk.nrows, groups + len(blk.group_offsets) - 1
        return parts, nbytes, samples, groups

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        pending = []
        it = iter(units)
        for unit in it:
            pending.append(pool.submit(work, unit))
            if len(pending) >= 2 * threads:
                break
        while pending:
            parts, nbytes, samples, groups = pending.pop(0).result()
            for part in parts:
                write(part)
            counts["samples"] += samples
            counts["groups"] += groups
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
        # a line's main features first, then the aux ones (the schema lists them as the input first had them)
        self.sparse = sorted(schema.sparse, key=lambda s: s.table)
        self.dense = sorted(schema.dense, key=lambda s: s.table)
        sp_name, sp_name_off = byte_blob([s.name.encode() for s in self.sparse])
        dn_name, dn_name_off = byte_blob([s.name.encode() for s in self.dense])
        dense_layout = DenseLayout(self.dense)
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
        _refuse_what_text_cannot_carry(blk, first_group)
        schema, place = self.schema, self.place
        n = blk.nrows
        rows = [np.arange(n, dtype=np.int64)]
        for t in range(schema.tables - 1):
            rows.append(blk.tables[t].refer[rows[-1]])
        starts = np.empty((len(self.sparse), n), np.int64)
        ends = np.empty((len(self.sparse), n), np.int64)
        for f, spec in enumerate(self.sparse):
            off = blk.tables[spec.table].sp_offsets[place[spec.name]]
            starts[f] = off[rows[spec.table]]
            ends[f] = off[rows[spec.table] + 1]
        dense = (
            np.hstack([blk.tables[s.table].dense[place[s.name]][rows[s.table]] for s in self.dense])
            if self.dense
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


def _records_to_text(unit, schema, simple, write, first_group, count, progress=None):
    """Write the samples of a pb/spb unit as text lines (``count`` gets each Block); returns the groups written."""
    writer = _TextWriter(schema)
    group = first_group
    for blk in ProtobufFormat(schema, simple=simple).read_unit(unit):
        count(blk)
        group += writer.write(blk, group, write)
        if progress is not None:
            progress.update(blk.nbytes)
    return group - first_group


def _refuse_what_text_cannot_carry(blk, first_group):
    """A DataError for a 128-bit id (``hkey != 0``) or a sample id holding ``|`` or a newline in ``blk``, which a
    text line cannot carry (FORMATS.md).  A sample id is located by its group's position in the source (pb), or as
    a record: a Parquet block (no group positions) has a sample a group, ``first_group`` its first row."""
    if blk.sp_hkeys is not None and blk.sp_hkeys.any():
        raise DataError(
            "a 128-bit id (hkey != 0) has no text form;",
            source=blk.source,
            offset=blk.start,
            text="",
            expected="64-bit ids (hkey 0) for text output",
            kind="HKEY",
        )
    bad = np.flatnonzero((blk.sid_bytes == ord("|")) | (blk.sid_bytes == ord("\n")))
    if not len(bad):
        return
    row = int(np.searchsorted(blk.sid_offsets, bad[0], side="right")) - 1
    sid = blk.sid_bytes[blk.sid_offsets[row] : blk.sid_offsets[row + 1]].tobytes().decode("utf-8", "replace")
    if blk.group_pos is not None:
        group = int(np.searchsorted(blk.group_offsets, row, side="right")) - 1
        where = {"offset": int(blk.group_pos[group])}
    else:
        where = {"offset": blk.start, "record": first_group + row}
    raise DataError(
        "a sample id holding '|' or a newline has no text form;",
        source=blk.source,
        text=sid,
        expected="sample ids without '|' or newlines for text output",
        kind="SAMPLE_ID",
        **where,
    )


def _blocks_to_records(blocks, schema, dst, write, count):
    """Write Blocks of one table and one sample per group (``parquet_blocks``) as text lines or pb/spb records
    (``count`` gets each Block)."""
    if dst is FileType.txt:
        writer, group = _TextWriter(schema), 0
        for blk in blocks:
            count(blk)
            group += writer.write(blk, group, write)
        return
    encoder = RecordEncoder(schema, set(), dst is FileType.spb)
    for blk in blocks:
        count(blk)
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
RANGE_MB = 256  # on a cluster: the byte ranges of a large text input, one task and one part each
SAMPLE_MB = 16  # on a cluster: the leading MB of each input that the features are found from


def convert(
    inputs,
    output,
    *,
    src=None,
    dst=None,
    aux=None,
    threads=None,
    client=None,
    range_mb=RANGE_MB,
    sample_mb=SAMPLE_MB,
    compression=None,
    log=print,
    progress=None,
):
    """Convert sample files; returns a summary dict (inputs, outputs, aux features, bytes, samples).

    Parameters
    ----------
    inputs : list of str
        Files, directories, globs or URLs, all of one format.
    output : str
        A file (all inputs, in order), a directory (one file per input, named after it, and a ``_manifest.json``
        listing them in input order), or a ``kafka://`` topic (staged in a temporary local file, then sent as
        ``ingest produce`` does; ``dst`` defaults to pb).
    src, dst : str or None
        Formats; inferred from the names when None.
    aux : None, "auto" or list of str
        text -> pb only: the features stored once per group in table 1.
    threads : int
        Parse/encode threads (default: the CPU count); one per task on a cluster.
    client : dask.distributed.Client, str or None
        A Dask client, or the address of a scheduler (``--scheduler``), whose workers write the output, a
        directory (``parts.py``): uncompressed text inputs larger than ``range_mb`` MB are cut at group
        boundaries into ranges of about that size, one task and one part each; other inputs are one task each.
    sample_mb : int
        On a cluster, the features (and ``aux="auto"``) are found from the first ``sample_mb`` MB of each input;
        a task that meets a feature the sample did not have fails, naming it and its file.
    compression : str or None
        Codec of the files of a directory output (``zstd``, ``gzip``, ``lz4``); a file output's is its suffix.
    progress : object with ``update(n)`` and ``total``, or None
        Told of the input bytes converted as they are (a tqdm bar; not on a cluster).  ``total`` is set to
        the input bytes when no input is compressed.
    """
    if is_topic(output):  # staged in a local file, then sent whole groups or records per message
        if client is not None:
            raise ConfigError(
                f"{output}: a topic is sent from this machine; convert to a directory on the cluster, then "
                "`ingest produce` it"
            )
        with tempfile.TemporaryDirectory(prefix="ingest-convert-") as tmp:
            dst = format_of("x.pb", dst)
            staged = os.path.join(tmp, f"staged.{dst.value}")
            summary = convert(inputs, staged, src=src, dst=dst, aux=aux, threads=threads, log=log)
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
    with dask_client(client) if isinstance(client, str) else contextlib.nullcontext(client) as client:
        on_cluster = client is not None
        parts, directory = output_parts(
            files,
            output,
            dst.value,
            compression=compression,
            range_bytes=max(1, int(range_mb * MIB)) if on_cluster else None,
            splittable=src is FileType.txt and dst is not Parquet.parquet,
        )
        for part in parts:  # before anything is read
            check_writable(part.url, "output")
            if dst is Parquet.parquet:
                refuse_compressed(part.url)
        threads = 1 if on_cluster else threads or os.cpu_count() or 1
        limit = max(1, int(sample_mb * MIB)) if on_cluster else None
        summary = {"from": src.value, "to": dst.value, "inputs": [u for u, _ in files], "aux": []}
        kernels_ready = None
        if src is Parquet.parquet:
            warmup.notice(["write-text" if dst is FileType.txt else "write-pb"])
            features = scan_parquet(files)
        else:  # to Parquet: the reader announces and compiles its kernels; on a cluster, the workers do
            if dst is not Parquet.parquet and not on_cluster:
                kernels_ready = _compile_side_by_side(src, dst)
            features = scan_features(plan_units(files, splittable=False), src, os.cpu_count() or 1, limit)
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
        if kernels_ready is not None:
            kernels_ready()
        job = dict(src=src, dst=dst, aux=aux, features=features, threads=threads)
        if on_cluster:
            results = run_on_cluster(client, parts, _convert_part, **job, sample_mb=sample_mb)
        else:
            if progress is not None and not any(infer_compression(url) for url, _ in files):
                progress.total = sum(size or 0 for _, size in files)
            results = [_convert_part(part, **job, progress=progress) for part in parts]
        if directory is not None:
            write_manifest(directory, parts, results, dst.value)
    summary["outputs"] = [part.url for part in parts]
    summary["bytes_out"] = sum(r["bytes"] for r in results)
    summary["bytes_in"] = sum(s or 0 for _, s in files)
    summary["samples"] = sum(r["samples"] for r in results)
    return summary


def _convert_part(part, *, src, dst, aux, features, threads, sample_mb=None, progress=None):
    """Write one output file (a ``Part``); returns its ``bytes`` (before compression), ``samples`` and ``groups``.
    With ``sample_mb`` (on a cluster), its input is first checked to hold only the ``features`` of the sample."""
    schema = features.schema()
    units = None if part.unit is None else [part.unit]
    if sample_mb is not None and src is not Parquet.parquet:
        _check_sampled(units or plan_units(part.files, splittable=False), src, features, sample_mb)
    counts = {"samples": 0, "groups": 0}

    def count(blk):
        counts["samples"] += blk.nrows
        counts["groups"] += len(blk.group_offsets) - 1

    writer = AtomicWriter(part.url, groups=dst in (FileType.pb, FileType.spb))  # each write: whole records
    try:
        if dst is Parquet.parquet:  # Parquet holds one sample per row, no groups
            counts["samples"] = counts["groups"] = write_parquet(
                part.files, src, features, threads, writer.write, progress
            )
        elif src is Parquet.parquet:
            _blocks_to_records(parquet_blocks(part.files, schema, progress), schema, dst, writer.write, count)
        elif src is FileType.txt:
            units = units or plan_units(part.files, splittable=True, task_num=threads)
            _text_to_records(units, schema, aux, dst is FileType.spb, threads, writer.write, counts, progress)
        elif dst is FileType.txt:
            group = 0
            for unit in units or plan_units(part.files, splittable=False):
                group += _records_to_text(unit, schema, src is FileType.spb, writer.write, group, count, progress)
        else:
            raise ConfigError(f"{src.value} -> {dst.value}: convert through text (txt)")
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    return {"bytes": writer.bytes, **counts}


def _check_sampled(units, src, sampled, sample_mb):
    """A ``DataError`` when ``units`` hold a feature, or more labels, than ``sampled`` (the features found in
    the first ``sample_mb`` MB of each input): the parser would skip that feature, or those labels, silently."""
    found = scan_features(units, src)
    known = {name: rest for name, *rest in sampled.declarations()}
    unit = units[0]
    where = f"bytes {unit.start}-{unit.end if unit.end is not None else unit.size} of this file"
    for name, *rest in found.declarations():
        if known.get(name) != rest:
            raise DataError(
                f"feature {name!r} of {where} is {'not' if name not in known else 'otherwise'} in the first "
                f"{sample_mb} MB of each input, which the features were found from;",
                source=unit.url,
                offset=unit.start,
                text=name,
                feature=name,
                kind="UNSAMPLED_FEATURE",
                expected=f"the features of the sample: give a --sample-mb larger than {sample_mb}",
            )
    if found.max_labels > sampled.max_labels:
        raise DataError(
            f"samples of {where} have {found.max_labels} labels, more than the {sampled.max_labels} of the first "
            f"{sample_mb} MB of each input;",
            source=unit.url,
            offset=unit.start,
            text="",
            kind="TOO_MANY_LABELS",
            expected=f"as many labels as the sample: give a --sample-mb larger than {sample_mb}",
        )
