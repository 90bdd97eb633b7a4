"""Front end of the protobuf sample formats ``pb`` and ``spb``: framing, scratch, errors.

Records are read into a reusable buffer; ``decode_chunk`` takes the whole records in it
and the partial one at the end is kept for the next read.  It writes the sparse ids straight
into the columns the Block keeps, a region per feature sized by ``Room``.  Per chunk the
Python work is O(tables): a kernel call, the offsets of each table and a Block.
"""

import functools
import threading

import numpy as np

from .._native import protobuf as K
from .._native.columns import ChunkRows
from .._native.names import build_name_table
from ..errors import DataError, StateError
from ..features import DenseLayout
from ..blocks import Table
from ..sources.files.streams import skip
from .base import Kept, KeptRows, Room, UnitFormat, chunk_block, grown, refill, whole_so_far

__all__ = [
    "ProtobufFormat",
    "SimpleProtobufFormat",
    "ProtobufDecodeError",
    "DEFAULT_MAX_RECORD_BYTES",
    "record_starts",
    "framing_problem",
]

DEFAULT_MAX_RECORD_BYTES = 64 << 20

_KIND = {
    getattr(K, name): name
    for name in (
        "TRUNCATED",
        "TOO_LONG",
        "MALFORMED",
        "WRONG_WIRE_TYPE",
        "MISSING_REQUIRED",
        "MISSING_KEY",
        "TYPE_MISMATCH",
        "DENSE_VALUES",
        "DENSE_WIDTH",
        "DENSE_REPEATED",
        "TOO_FEW_LABELS",
        "LINE_COUNT",
        "SAMPLE_ID_COUNT",
        "BAD_REFER",
        "BAD_TIMESTAMP",
        "BAD_ENUM",
    )
}

_SIMPLE_FIELDS = {1: "sample_id", 2: "label", 3: "feature_line"}


class ProtobufDecodeError(DataError):
    """A record of a ``pb``/``spb`` file that is cut short, too long or does not decode."""


class _Scratch:
    """Reusable kernel outputs of one worker, grown when one record does not fit."""

    def __init__(self, rows, sid_bytes, tables, nsparse, dense_width, label_count):
        self.ends = np.empty((rows, nsparse), np.int64)  # a row's ends side by side: one cache line a sample
        self.refer = np.empty((tables, rows), np.int64)
        self.tab_rows = np.zeros(tables, np.int64)
        self.dense = np.empty((tables, rows, dense_width), np.float32)
        self.labels = np.empty((rows, label_count), np.float32)
        self.timestamps = np.empty(rows, np.int64)
        self.sid_bytes = np.empty(sid_bytes, np.uint8)
        self.sid_off = np.empty(rows + 1, np.int64)
        self.group_start = np.empty(rows + 1, np.int64)
        self.group_pos = np.empty(rows + 1, np.int64)
        self.errors = np.empty((64, K.ERROR_COLUMNS), np.int64)
        self.st = np.zeros(K.STATE_SLOTS, np.int64)

    @functools.cached_property
    def outputs(self):
        """The ``Rows`` of the arrays above, made and checked once, as ``decode_chunk`` takes them (plain)."""
        return K.Rows(*(getattr(self, name) for name in K.Rows._fields)).checked().plain()

    @functools.cached_property
    def kept(self):
        """The ``ChunkRows`` of the arrays above (what a Block keeps of them), made and checked once, plain."""
        return ChunkRows(*(getattr(self, name) for name in ChunkRows._fields)).checked().plain()

    def grown(self):
        return _Scratch(
            2 * len(self.timestamps),
            2 * len(self.sid_bytes),
            len(self.tab_rows),
            self.ends.shape[1],
            self.dense.shape[2],
            self.labels.shape[1],
        )


def count_records_before(unit, offset, max_record):
    """Records of the unit's stream before ``offset`` (for record numbers of errors after a restore)."""
    with unit.rewound().open() as f:
        return int(np.searchsorted(record_starts(f, offset, max_record), offset))


def record_starts(f, size, max_record, chunk_bytes=4 << 20):
    """Start offsets (int64) of the length-prefixed records of a file of ``size`` bytes, from its prefixes.

    The file, read from its start, is read in chunks whose records a kernel frames; a record
    longer than a chunk is skipped over.  The walk stops at a length it cannot trust (above ``max_record``, or past
    the end); the offset where it stopped is kept as the last start, so the byte range holding
    it decodes up to there and reports the error, and later ranges hold nothing.
    """
    buf = np.empty(chunk_bytes, np.uint8)
    found = np.empty(chunk_bytes // 4 + 1, np.int64)
    out = []
    base = filled = 0
    while base < size:
        filled, eof = refill(f, buf, filled)
        k, consumed, bad = K.frame_records(buf, filled, max_record, found)
        out.append(found[:k] + base)
        if bad or (eof and consumed < filled):  # a bad or cut length: the range holding it reports it
            out.append(np.array([base + consumed], np.int64))
            break
        if eof:
            break
        if k == 0 and filled >= 4:  # one record longer than the buffer: note it and seek past it
            end = base + 4 + int(np.frombuffer(buf[:4].tobytes(), "<u4")[0])
            out.append(np.array([base], np.int64))
            if end > size:
                break
            skip(f, end - base - filled, "")
            base, filled = end, 0
            continue
        buf[: filled - consumed] = buf[consumed:filled]
        filled -= consumed
        base += consumed
    return np.concatenate(out) if out else np.empty(0, np.int64)


def framing_problem(head, size, simple, max_record=DEFAULT_MAX_RECORD_BYTES):
    """Why bytes starting with ``head`` (a file of ``size`` bytes, None when unknown) are not length-prefixed
    ``SampleGroup`` (``SampleSimple`` when ``simple``) records, judged by the first record; None when they may be.

    A text file read as pb has a first "length" of four text bytes (hundreds of MB or more), random bytes a length
    beyond the file or a first field that no record has.
    """
    message = "SampleSimple" if simple else "SampleGroup"
    if len(head) == 0:  # an empty file holds no record, which is not wrong
        return None
    if len(head) < 4:
        return f"it has {len(head)} bytes, fewer than the 4-byte length of a record"
    length = int.from_bytes(bytes(head[:4]), "little")
    if length > max_record or (size is not None and length > size - 4):
        room = (
            f"the {size - 4:,} bytes after it"
            if size is not None and length <= max_record
            else f"max_record_bytes={max_record:,}"
        )
        return f"its first 4 bytes {bytes(head[:4])!r} read as a record length give {length:,} bytes, more than {room}"
    if length and len(head) > 4:
        tag = head[4]
        field, wire = tag >> 3, tag & 7
        if not 1 <= field <= (3 if simple else 5) or wire != 2:
            return (
                f"its first record starts with the tag byte 0x{tag:02x} (field {field}, wire type {wire}), "
                f"not a field of {message} (fields 1 to {3 if simple else 5}, length-delimited)"
            )
    return None


class _RecordStarts:
    """``record_starts`` of each file, computed once (by the first worker that opens a range of it)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._files = {}

    def starts(self, f, url, size, max_record):
        with self._lock:
            if url not in self._files:
                self._files[url] = record_starts(f, size, max_record)
            return self._files[url]


class ProtobufFormat(UnitFormat):
    """Parses ``pb`` (``simple=False``) or ``spb`` work units into Blocks for one schema.

    Uncompressed files are splittable: a byte range holds the records that start in it.

    Parameters
    ----------
    schema : ingest.features.Schema
    simple : bool
        Records are ``SampleSimple`` (``spb``) rather than ``SampleGroup`` (``pb``).
    on_skip : callable or None
        Receives each ``ProtobufDecodeError`` of a skipped record; None means raise the first.
    chunk_bytes : int
        Size of the read buffer (grown when one record does not fit).  1 MiB, not text's 4: a chunk's
        decoded ids pass through memory three times (tokens, columns, batch), and at 4 MiB two workers
        outgrew the shared cache: 1 MiB was 7-10 % faster at 1 thread and 9-16 % at 2 (docs/decisions.md).
    max_record_bytes : int
        Longest record accepted; a longer length prefix is an error (the file is corrupt
        or not of this format), and the rest of the unit cannot be framed.
    """

    splittable = True

    def __init__(
        self, schema, simple=False, on_skip=None, chunk_bytes=1 << 20, max_record_bytes=DEFAULT_MAX_RECORD_BYTES
    ):
        self.schema = schema
        self.simple = simple
        self.on_skip = on_skip
        self.chunk_bytes = chunk_bytes
        self.max_record_bytes = max_record_bytes
        self.message = "SampleSimple" if simple else "SampleGroup"
        self._records = _RecordStarts()
        self._kept = Kept()
        specs = schema.specs
        self.names = build_name_table([s.name for s in specs]).plain()  # only the kernels read these
        sparse_pos = {s.name: i for i, s in enumerate(schema.sparse)}
        dense_pos = {s.name: i for i, s in enumerate(schema.dense)}
        # per declared feature: kind, index among its kind, table
        feat = np.array(
            [
                [K.SPARSE if s.name in sparse_pos else K.DENSE, sparse_pos.get(s.name, dense_pos.get(s.name)), s.table]
                for s in specs
            ],
            np.int64,
        ).reshape(len(specs), 3)
        self.feat_name = [s.name for s in specs]
        dense = schema.dense
        self.layout = DenseLayout(dense)
        dn_feat = np.stack([self.layout.nvec, self.layout.first_elem], axis=1).reshape(len(dense), 2)
        # per dense feature, in table order: its table, first column and width, and per table which of those are
        # its own
        by_table = [
            [(t, int(self.layout.first_col[i]), s.width) for i, s in enumerate(dense) if s.table == t]
            for t in range(schema.tables)
        ]
        dense_cols = np.array([c for cols in by_table for c in cols], np.int64).reshape(-1, 3)
        ends = np.cumsum([0] + [len(cols) for cols in by_table]).tolist()
        self.dense_of_table = [slice(a, b) for a, b in zip(ends, ends[1:])]
        # per table: its sparse features (indices among all sparse ones) and their cutoffs
        table_sparse = [
            np.array([sparse_pos[s.name] for s in schema.sparse_in(t)], np.int64) for t in range(schema.tables)
        ]
        tab_feat_off = np.cumsum([0] + [len(f) for f in table_sparse]).astype(np.int64)
        tab_feats = np.concatenate(table_sparse + [np.empty(0, np.int64)])
        cutoff = [[s.cutoff for s in schema.sparse_in(t)] for t in range(schema.tables)]
        self.kept_rows = KeptRows(table_sparse, cutoff, dense_cols, schema.label_count)
        self.features = K.FeatureLayout(feat, dn_feat, self.layout.elem_col, tab_feats, tab_feat_off).checked().plain()

    def _new_scratch(self):
        rows = max(1024, self.chunk_bytes // 64)
        return _Scratch(
            rows,
            self.chunk_bytes // 8 + 4096,
            self.schema.tables,
            len(self.schema.sparse),
            self.layout.total,
            self.schema.label_count,
        )

    def read_stream(self, f, unit, stop, clock=None):
        base = unit.stream_start  # source offset of buf[0]; unit.open() positioned an aligned unit there
        records = 0 if base == 0 else None  # records of the file before buf[0], counted on the first error
        limit = None  # bytes of the source from base that belong to this unit
        if not unit.aligned:  # a byte range: the records that start in it
            starts = self._records.starts(f, unit.url, unit.size, self.max_record_bytes)
            first = unit.start if unit.resume is None else unit.resume[0]
            records = int(np.searchsorted(starts, first))
            last = len(starts) if unit.end is None else int(np.searchsorted(starts, unit.end))
            if unit.resume is not None:
                _check_resume(unit, starts, records, last)
            if records >= last:
                return
            base = int(starts[records])
            limit = (unit.size if last == len(starts) else int(starts[last])) - base
            f.seek(base)
        options = (
            K.DecodeOptions(
                bool(self.simple), int(self.max_record_bytes), self.on_skip is None, int(self.schema.label_count)
            )
            .checked()
            .plain()
        )
        scratch, room, buf = self._kept.take() or (
            self._new_scratch(),
            Room(len(self.schema.sparse), value_bytes=4, high_keys=True),
            np.empty(self.chunk_bytes, np.uint8),
        )
        try:
            filled = 0
            eof = False
            while True:
                if not eof:
                    filled, eof = refill(f, buf, filled, limit, clock)
                if filled == 0:
                    return
                final = whole_so_far(f, eof)
                cols = room.columns(filled)
                plain_cols = cols.plain()
                status, consumed, nrec, nerr = K.decode_chunk(
                    buf, filled, final, options, self.names, self.features, plain_cols, scratch.outputs
                )
                room.decoded(consumed)
                if nerr and records is None:
                    records = count_records_before(unit, base, self.max_record_bytes)
                errors = (
                    [self._error(f, buf, filled, scratch.errors[k], unit, base, records) for k in range(nerr)]
                    if nerr
                    else ()
                )
                if scratch.st[K.S_NROWS]:
                    yield self._block(scratch, cols, plain_cols, unit, base, base + consumed)
                if status == K.STOPPED_AT_ERROR or (status == K.UNFRAMED and self.on_skip is None):
                    raise errors[-1]
                for err in errors:
                    self.on_skip(err)
                if status == K.UNFRAMED:
                    return  # no length prefix to trust: the rest of the unit is lost (reported above)
                if consumed == 0:
                    if status == K.FULL and scratch.st[K.S_FULL_FEATURE] >= 0:
                        room.too_small(int(scratch.st[K.S_FULL_FEATURE]), filled)
                    elif status == K.FULL:
                        scratch = scratch.grown()
                    else:  # one record larger than the buffer
                        buf = grown(buf, filled, int(np.frombuffer(buf[:4].tobytes(), "<u4")[0]) + 4)
                    continue
                buf[: filled - consumed] = buf[consumed:filled]
                filled -= consumed
                base += consumed
                if records is not None:
                    records += nrec
                if limit is not None:
                    limit -= consumed
                if eof and filled == 0:
                    return
                if stop is not None and stop.is_set():
                    return
        finally:
            self._kept.keep((scratch, room, buf))

    def _block(self, s, cols, plain_cols, unit, start, end):
        st = s.st
        high = bool(st[K.S_ANY_HKEY])
        rows = s.tab_rows.tolist()
        parts, offsets, dense, refers = self.kept_rows.of(
            rows, s.kept, plain_cols, high, int(st[K.S_NSID]), int(st[K.S_NGROUPS]), start
        )
        last = len(rows) - 1
        tables = []
        for t, rows_t in enumerate(rows):
            tables.append(
                Table(rows_t, offsets[t], tuple(dense[self.dense_of_table[t]]), refers[t] if t < last else None)
            )
        return chunk_block(tuple(tables), parts, cols, high, unit, start, end)

    def _error(self, f, buf, filled, row, unit, base, records):
        code, record, record_pos, pos, table, line, feat, got = (int(v) for v in row)
        feature = self.feat_name[feat] if feat >= 0 else None
        reason, expected = self._reason(code, table, line, feature, got)
        text = buf[pos : min(pos + 16, filled)].tobytes().hex(" ")
        if table >= 0 and not self.simple:
            field = f"feature_tables[{table}]" + (f".feature_lines[{line}]" if line >= 0 else "")
        else:
            field = "feature_line" if self.simple and table >= 0 else None
        return ProtobufDecodeError(
            reason,
            source=f.describe(base + pos),
            offset=base + pos,
            record=records + record,
            expected=expected,
            text=text,
            field=field,
            feature=feature,
            kind=_KIND[code],
        )

    def _reason(self, code, table, line, feature, got):
        """(reason, expected) for an error code of the decoder."""
        msg = self.message
        if code == K.TRUNCATED:
            return (
                f"record cut short by the end of the data ({got} bytes present), bytes",
                "a 4-byte little-endian length, then that many bytes",
            )
        if code == K.TOO_LONG:
            return (
                f"record length {got} is above max_record_bytes={self.max_record_bytes}; the length bytes are",
                f"a length-prefixed {msg} (is this a {'spb' if self.simple else 'pb'} file?)",
            )
        if code == K.MALFORMED:
            return "bytes that are not protobuf wire format", f"a serialized {msg}"
        if code == K.WRONG_WIRE_TYPE:
            return f"field of wire type {got}", f"the wire type of {msg}'s field"
        if code == K.MISSING_REQUIRED:
            what = f"SampleSimple.{_SIMPLE_FIELDS[got]}" if self.simple and table < 0 else "Feature.type"
            return f"required field {what} is missing", f"{what} present"
        if code == K.MISSING_KEY:
            return "sparse FeatureValue without key", "FeatureValue.key in every sparse value"
        if code == K.TYPE_MISMATCH:
            stored = "kSparse" if got == 1 else "kDense"
            return f"feature stored as {stored}", "the type it was declared with"
        if code == K.DENSE_VALUES:
            return f"dense feature with {got} FeatureValues", "exactly one FeatureValue holding the vector"
        if code == K.DENSE_WIDTH:
            nvec = self.schema.by_name[feature].nvec
            return f"dense vector of {got} floats", f"{nvec} floats (nvec of {feature!r})"
        if code == K.DENSE_REPEATED:
            return "dense feature repeated in one line", "each dense feature at most once per line"
        if code == K.TOO_FEW_LABELS:
            return f"{got} labels", f"at least label_count={self.schema.label_count} labels"
        if code == K.LINE_COUNT:
            return f"table 0 has {got} lines", "one table-0 line per sample (per Label in labels)"
        if code == K.SAMPLE_ID_COUNT:
            return f"{got} sample ids", "no sample ids or one per sample"
        if code == K.BAD_REFER:
            return (f"refer {got} out of range", f"the index of a line of table {table + 1} of the same group")
        if code == K.BAD_TIMESTAMP:
            return "extension 'timestamp' is not an integer", "a base-10 int64"
        if code == K.BAD_ENUM:
            return f"feature type {got}", "kSparse (1) or kDense (2)"
        raise AssertionError(f"unknown error code {code}")


class SimpleProtobufFormat(ProtobufFormat):
    """Parses ``spb`` work units: ``SampleSimple`` records, one sample each (options as ``ProtobufFormat``)."""

    def __init__(self, schema, **options):
        super().__init__(schema, simple=True, **options)


def _check_resume(unit, starts, records, last):
    """A byte range resumes at one of its records' starts, or at its end (all of it delivered), as ``state()``
    records them; any other position would pass records over unread."""
    end = unit.size if last == len(starts) else int(starts[last])
    first = unit.resume[0]
    ours = int(np.searchsorted(starts, unit.start)) <= records <= last
    if not (ours and (first == end or (records < last and int(starts[records]) == first))):
        raise StateError(
            f"{unit.url}: the reader state resumes the byte range [{unit.start}, {end}) at byte {first}, where "
            f"none of its records starts (was the state edited, or the input?)"
        )
