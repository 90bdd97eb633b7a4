"""Front end of the text sample format: chunking, alignment of byte ranges, errors.

The bytes of a work unit are read into a reusable buffer; ``parse_text_chunk`` takes the
whole groups in it, the open group at the end is kept for the next read.  Per chunk the
Python work is O(1): a few kernel calls (parsing, what the Block keeps: offsets and rows) and a Block.
"""

import numpy as np

from .._native import text as K
from .._native.columns import ChunkRows
from .._native.names import build_name_table
from ..errors import StateError, TextParseError
from ..features import DenseLayout
from ..blocks import Table, empty_aux_tables
from .base import Kept, KeptRows, Room, UnitFormat, chunk_block, grown, refill, whole_so_far

__all__ = ["TextFormat", "group_start_at_or_after", "range_span", "count_lines_before"]

_FIELD_NAMES = {
    K.F_LINE: "line",
    K.F_SAMPLE_ID: "sample_id",
    K.F_GROUP_ID: "group_id",
    K.F_SPARSE: "sparse",
    K.F_DENSE: "dense",
    K.F_LABELS: "labels",
    K.F_TIMESTAMP: "timestamp",
}

_KIND = {
    getattr(K, name): name
    for name in (
        "TOO_FEW_FIELDS",
        "TOO_MANY_FIELDS",
        "MISSING_AT",
        "BAD_KEY",
        "KEY_OVERFLOW",
        "BAD_VALUE",
        "EMPTY_TOKEN",
        "BAD_DENSE",
        "DENSE_WIDTH",
        "DENSE_REPEATED",
        "BAD_LABEL",
        "TOO_FEW_LABELS",
        "BAD_TIMESTAMP",
    )
}

_ALIGN_WINDOW = 1 << 16
_LOOK_BACK = 1 << 12  # first window for the line before a range's first line start (doubled until it holds one)


def _reason(code, spec, label_count, text):
    """(reason, expected) for an error code of the text kernel."""
    if code == K.TOO_FEW_FIELDS:
        return "too few fields in line", "sample_id|group_id|sparse|dense|labels[|timestamp]"
    if code == K.TOO_MANY_FIELDS:
        return "too many fields, extra text", "at most 6 '|'-separated fields"
    if code == K.MISSING_AT:
        return "feature entry without '@'", "name@values"
    if code == K.BAD_KEY:
        return "key is not an integer", "a base-10 signed 64-bit integer"
    if code == K.KEY_OVERFLOW:
        return "key overflows int64", "an integer within [-2**63, 2**63 - 1]"
    if code == K.BAD_VALUE:
        return "value is not a float", "a decimal float after ':'"
    if code == K.EMPTY_TOKEN:
        return "empty token", "key or key:value between commas"
    if code == K.BAD_DENSE:
        return "dense element is not a float", "a decimal float"
    if code == K.DENSE_WIDTH:
        width = text.count(",") + 1
        return f"dense vector of {width} floats", f"{spec.nvec} floats (nvec of {spec.name!r})"
    if code == K.DENSE_REPEATED:
        return "dense feature repeated in one line", "each dense feature at most once per line"
    if code == K.BAD_LABEL:
        return "label is not a float", "a decimal float"
    if code == K.TOO_FEW_LABELS:
        n = 0 if not text else text.count(",") + 1
        return f"{n} labels", f"at least label_count={label_count} labels"
    if code == K.BAD_TIMESTAMP:
        return "timestamp is not an integer", "a base-10 int64, or nothing"
    raise AssertionError(f"unknown error code {code}")


class _Scratch:
    """Reusable kernel outputs of one worker, grown when a chunk does not fit."""

    def __init__(self, rows, nsparse, sid_bytes, dense_width, label_count, n_dense):
        self.ends = np.empty((rows, nsparse), np.int64)  # a row's ends side by side: one cache line a sample
        self.dense = np.empty((rows, dense_width), np.float32)
        self.labels = np.empty((rows, label_count), np.float32)
        self.timestamps = np.empty(rows, np.int64)
        self.sid_bytes = np.empty(sid_bytes, np.uint8)
        self.sid_off = np.empty(rows + 1, np.int64)
        self.group_start = np.empty(rows + 1, np.int64)
        self.group_pos = np.empty(rows + 1, np.int64)
        self.errors = np.empty((max(64, rows // 16), K.ERROR_COLUMNS), np.int64)
        self.dn_seen = np.zeros(n_dense, np.bool_)
        # as parse_text_chunk takes them (plain): only the kernel reads them
        self.outputs = K.TextOutputs(*(getattr(self, name) for name in K.TextOutputs._fields)).checked().plain()
        # what a Block keeps of them (KeptRows.of, which takes them plain): one table, with no refer
        self.tab_rows = np.zeros(1, np.int64)
        self.kept = (
            ChunkRows(
                self.ends,
                self.tab_rows,
                np.empty((1, 0), np.int64),
                self.dense.reshape(1, rows, dense_width),
                self.labels,
                self.timestamps,
                self.sid_bytes,
                self.sid_off,
                self.group_start,
                self.group_pos,
            )
            .checked()
            .plain()
        )

    def grown(self):
        return _Scratch(
            2 * len(self.timestamps),
            self.ends.shape[1],
            2 * len(self.sid_bytes),
            self.dense.shape[1],
            self.labels.shape[1],
            len(self.dn_seen),
        )


def _gid(line):
    """Group id of a line (bytes, no newline), or None when the line has no group-id field."""
    if line.endswith(b"\r"):
        line = line[:-1]
    parts = line.split(b"|", 2)
    return parts[1] if len(parts) == 3 else None


def _starts_group(prev, gid):
    return prev is None or gid is None or prev == b"" or gid == b"" or prev != gid


def _blank(line):
    return line == b"" or line == b"\r"


def group_start_at_or_after(f, offset, size, before=None):
    """Byte position of the first line at or after ``offset`` that starts a sample group.

    A line starts a group when its group id differs from the previous non-blank line's,
    or either is empty.  Byte ranges of a file are aligned with this function at both
    ends, so no group is ever cut between two work units.  ``max_group_size`` cuts are
    not used as alignment points: counting restarts at every group-id change, so a range
    that starts there groups exactly as a whole-file read does.

    With ``before``, the search stops there: a result >= ``before`` only says that no group starts in
    ``[offset, before)``, which keeps the cost of aligning a byte range to the range's own bytes (a line far
    longer than the ranges would otherwise be scanned once by every range it spans).
    """
    if offset <= 0:
        return 0
    if offset >= size:
        return size
    stop = size if before is None else min(before, size)
    # p0: first line start >= offset
    f.seek(offset - 1)
    pos = offset - 1
    while True:
        data = f.read(_window(pos, stop))
        if not data:
            return size
        k = data.find(b"\n")
        if k >= 0:
            p0 = pos + k + 1
            break
        pos += len(data)
        if pos >= stop:
            return stop
    if p0 >= stop:
        return stop
    # group id of the previous non-blank line
    prev = None
    window = _LOOK_BACK
    while True:
        lo = max(0, p0 - window)
        f.seek(lo)
        lines = f.read(p0 - lo).split(b"\n")[:-1]  # the text ends with the newline at p0 - 1
        first_complete = 0 if lo == 0 else 1
        found = False
        for j in range(len(lines) - 1, first_complete - 1, -1):
            if not _blank(lines[j]):
                prev = _gid(lines[j])
                found = True
                break
        if found or lo == 0:
            has_prev = found
            break
        window *= 2
    # first line from p0 on that starts a group
    f.seek(p0)
    pos = p0
    tail = b""
    while True:
        data = f.read(_window(pos + len(tail), stop))
        buf = tail + data
        lines = buf.split(b"\n")
        complete = lines if not data else lines[:-1]
        for line in complete:
            if pos >= stop:
                return stop
            if not _blank(line):
                gid = _gid(line)
                if not has_prev or _starts_group(prev, gid):
                    return pos
                prev = gid
                has_prev = True
            pos += len(line) + 1
        if not data:
            return size
        tail = lines[-1]
        if pos >= stop:
            return stop


def _window(at, stop):
    """Bytes to read at ``at`` while aligning: no further than ``stop`` while that is ahead."""
    return _ALIGN_WINDOW if at >= stop else max(1, min(_ALIGN_WINDOW, stop - at))


def range_span(f, unit):
    """``(start, end)``: the bytes of the file ``f`` that the byte-range unit ``unit`` holds, both ends aligned to
    group starts (``group_start_at_or_after``); ``(unit.end, unit.end)`` when no group starts in the range."""
    if unit.end is None:
        return group_start_at_or_after(f, unit.start, unit.size), unit.size
    start = group_start_at_or_after(f, unit.start, unit.size, before=unit.end)
    if start >= unit.end:
        return unit.end, unit.end
    return start, group_start_at_or_after(f, unit.end, unit.size)


def _check_resume(f, url, aligned, end, start):
    """A byte range resumes where one of its lines starts (``state()`` marks the first line of a group), or at its
    end: any other position would pass samples over or parse half a line."""
    inside = aligned < start < end  # at either end nothing is to be checked (a last line may have no newline)
    if inside:
        f.seek(start - 1)
    if not aligned <= start <= end or (inside and f.read(1) != b"\n"):
        raise StateError(
            f"{url}: the reader state resumes the byte range [{aligned}, {end}) at byte {start}, where none of "
            f"its lines starts (was the state edited, or the input?)"
        )


def count_lines_before(unit, offset):
    """Number of newlines in the unit's file before ``offset`` (for line numbers of errors)."""
    n = 0
    with unit.rewound().open() as f:
        left = offset
        while left > 0:
            data = f.read(min(left, 1 << 24))
            if not data:
                break
            n += data.count(b"\n")
            left -= len(data)
    return n


class TextFormat(UnitFormat):
    """Parses text work units into Blocks for one schema.

    Parameters
    ----------
    schema : ingest.features.Schema
    max_group_size : int
    on_skip : callable or None
        Receives each ``TextParseError`` of a skipped line; None means raise the first.
    chunk_bytes : int
        Size of the read buffer (grown when one group does not fit).
    """

    splittable = True

    def __init__(self, schema, max_group_size=8192, on_skip=None, chunk_bytes=4 << 20):
        self.schema = schema
        self.max_group_size = max_group_size
        self.on_skip = on_skip
        self.chunk_bytes = chunk_bytes
        self._kept = Kept()
        # text carries table 0 only: features of aux tables stay empty
        self.sparse = list(schema.sparse_in(0))
        self.dense = list(schema.dense_in(0))
        # as parse_text_chunk takes them (plain): only the kernel reads these
        self.sp_table = build_name_table([s.name for s in self.sparse]).plain()
        self.dn_table = build_name_table([s.name for s in self.dense]).plain()
        self.layout = DenseLayout(self.dense)
        lay = self.layout
        columns = K.DenseColumns(lay.nvec, lay.first_elem, lay.elem_col, lay.first_col, lay.width)
        self.dense_columns = columns.checked().plain()
        dense_cols = np.array([(0, b, w) for b, w in zip(lay.first_col, lay.width)], np.int64).reshape(-1, 3)
        every = np.arange(len(self.sparse), dtype=np.int64)  # table 0's sparse features: all the chunk's
        self.kept_rows = KeptRows([every], [[s.cutoff for s in self.sparse]], dense_cols, schema.label_count)

    def _new_scratch(self):
        rows = max(256, self.chunk_bytes // 256)
        return _Scratch(
            rows,
            len(self.sparse),
            self.chunk_bytes // 8 + 4096,
            self.layout.total,
            self.schema.label_count,
            len(self.dense),
        )

    def read_stream(self, f, unit, stop, clock=None):
        start = unit.stream_start  # unit.open() positioned an aligned unit there
        end = None
        if not unit.aligned:
            aligned, end = range_span(f, unit)
            if unit.resume is not None:
                _check_resume(f, unit.url, aligned, end, start)
            start = aligned if unit.resume is None else start
            if start >= end:
                return
            f.seek(start)
        # a whole file resumes after a newline, or at its end (a last line may have no newline)
        mid_line = unit.resume is not None and f.byte_before not in (None, b"\n")
        options = K.TextOptions(self.on_skip is None, int(self.schema.label_count), int(self.max_group_size))
        options = options.checked().plain()
        scratch, room, buf = self._kept.take() or (
            self._new_scratch(),
            Room(len(self.sparse), value_bytes=2, high_keys=False),  # the shortest id: a digit and a separator
            np.empty(self.chunk_bytes, np.uint8),
        )
        try:
            filled = 0
            base = start  # source offset of buf[0]
            line_base = None  # newlines before `start`, counted on the first error
            lines_done = 0  # lines of this unit before buf[0]
            eof = False
            while True:
                if not eof:
                    filled, eof = refill(f, buf, filled, None if end is None else end - base, clock)
                if filled == 0:
                    return
                if mid_line:
                    raise StateError(
                        f"{unit.url}: the reader state resumes it at byte {start}, where no line starts (was the "
                        f"state edited, or the input?)"
                    )
                final = whole_so_far(f, eof)
                cols = room.columns(filled)
                plain_cols = cols.plain()
                status, consumed, lines, nrows, ngroups, full, nsid, nerr = K.parse_text_chunk(
                    buf,
                    0,
                    filled,
                    final,
                    options,
                    self.sp_table,
                    self.dn_table,
                    self.dense_columns,
                    plain_cols,
                    scratch.outputs,
                )
                room.decoded(consumed)
                errors = []
                if nerr:
                    if line_base is None:
                        line_base = count_lines_before(unit, start) if start else 0
                    errors = [
                        self._error(f, buf, filled, scratch.errors[k], unit, base, line_base + lines_done)
                        for k in range(nerr)
                    ]
                if nrows:
                    yield self._block(scratch, cols, plain_cols, nrows, ngroups, nsid, unit, base, base + consumed)
                if status == K.STOPPED_AT_ERROR:
                    raise errors[-1]
                for err in errors:
                    self.on_skip(err)
                if consumed == 0 and not (eof and status == K.DONE):
                    if status == K.FULL and full >= 0:
                        room.too_small(full, filled)
                    elif status == K.FULL:
                        scratch = scratch.grown()
                    else:  # one group larger than the buffer
                        buf = grown(buf, filled)
                    continue
                buf[: filled - consumed] = buf[consumed:filled]
                filled -= consumed
                base += consumed
                lines_done += lines
                if eof and filled == 0:
                    return
                if stop is not None and stop.is_set():
                    return
        finally:
            self._kept.keep((scratch, room, buf))

    def _block(self, s, cols, plain_cols, nrows, ngroups, nsid, unit, start, end):
        s.tab_rows[0] = nrows
        parts, [offsets], dense, _ = self.kept_rows.of([nrows], s.kept, plain_cols, False, nsid, ngroups, start)
        refer0, aux = empty_aux_tables(self.schema, parts.group_offsets, 0)
        main = Table(nrows, offsets, tuple(dense), refer0)
        return chunk_block((main, *aux), parts, cols, False, unit, start, end)

    def _error(self, f, buf, filled, row, unit, base, line_base):
        code, line, line_start, bad_s, bad_e, field, feat = (int(v) for v in row)
        spec = None
        if feat >= 0:
            spec = (self.sparse if field == K.F_SPARSE else self.dense)[feat]
        bad = buf[bad_s:bad_e].tobytes().decode("utf-8", errors="replace")
        text = bad if len(bad) <= 80 else bad[:77] + "..."
        reason, expected = _reason(code, spec, self.schema.label_count, bad)
        context = buf[line_start:filled].tobytes().split(b"\n", 1)[0].rstrip(b"\r")
        context = context.decode("utf-8", errors="replace")
        offset = base + bad_s
        return TextParseError(
            reason,
            source=f.describe(offset),
            offset=offset,
            expected=expected,
            text=text,
            line=line_base + line + 1,
            column=bad_s - line_start + 1,
            field=_FIELD_NAMES[field],
            feature=spec.name if spec else None,
            context=context,
            kind=_KIND[code],
        )
