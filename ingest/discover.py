"""What features sample files hold: every name, its type, table and dense width, and the label count.

Used where nothing is declared: ``ingest convert`` (which must lose no feature),
``ingest inspect`` and ``ingest-bench --features auto``.  The scans are numba kernels
(``scan_names`` for text, ``scan_record_names`` for pb/spb) that stop at each name not
seen before; Python work is per new name, not per line.
"""

import concurrent.futures
from dataclasses import dataclass

import numpy as np

from ._native.scan import last_newline, scan_names
from ._native.names import build_name_table
from ._native.protobuf import scan_record_names
from .errors import DataError
from .features import Schema, make_feature
from .formats import FileType
from .formats.base import grown, refill
from .formats.protobuf import framing_problem
from .formats.text import range_span

__all__ = ["FoundFeatures", "scan_text_features", "scan_record_features", "scan_features", "names_in"]

_SCAN_CHUNK = 8 << 20
MAX_FEATURES = 10_000  # distinct names in one input: beyond this it is not sample text


@dataclass
class FoundFeatures:
    """Every feature of some sample files, in order of first appearance.

    ``sparse`` is a list of ``(name, table)``, ``dense`` maps a name to ``(width, table)``;
    text has table 0 only.  ``label_count`` is the fewest labels a sample has,
    ``max_labels`` the most.
    """

    sparse: list
    dense: dict
    label_count: int
    max_labels: int

    def declarations(self):
        """``(name, type, table, nvec)`` of every feature, sparse ones first (nvec None)."""
        return [(n, "sparse", t, None) for n, t in self.sparse] + [
            (n, "dense", t, w) for n, (w, t) in self.dense.items()
        ]

    def schema(self, serialized=False):
        specs = [make_feature(n, kind, table=t, nvec=w, serialized=serialized) for n, kind, t, w in self.declarations()]
        return Schema(specs, self.label_count)


def _scan_file(unit, limit, scan, span=None):
    """Feed the first ``limit`` bytes of a file (all when None), or of ``span`` (``(start, end)`` offsets), to
    ``scan`` window by window.

    ``scan(buf, filled, at_end, base)`` (``base``: the file offset of ``buf[0]``) returns how many
    bytes of ``buf[:filled]`` it used; the
    rest is kept for the next window, and the buffer doubles when nothing could be used.
    ``at_end`` is True when the file or the span ended (not the limit).
    """
    start, end = span or (0, None)
    if end is not None and (limit is None or end - start <= limit):
        limit, hard_limit = end - start, True
    else:
        hard_limit = False
    buf = np.empty(_SCAN_CHUNK, np.uint8)
    filled = done = 0  # done: bytes read before buf[0]
    with unit.open() as f:
        if start:
            f.seek(start)
        while True:
            filled, eof = refill(f, buf, filled, None if limit is None else limit - done)
            ended = eof and (hard_limit or limit is None or done + filled < limit)
            used = scan(buf, filled, ended, start + done)
            if eof:
                return
            if used == 0:  # a line or record longer than the buffer
                buf = grown(buf, filled)
                continue
            buf[: filled - used] = buf[used:filled]
            filled -= used
            done += used


def _utf8_name(raw, unit, offset, hint=""):
    """A feature name's bytes as a str; a DataError when they are not UTF-8 (``hint`` ends what it expected):
    names are looked up by their UTF-8, so a name the scan cannot spell so would be found again and again."""
    try:
        return raw.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(
            "a feature name that is not UTF-8;",
            source=unit.url,
            offset=offset,
            text=raw.tobytes().decode("utf-8", "replace")[:80],
            expected=f"feature names in UTF-8 {hint}".rstrip(),
            kind="NAME_NOT_UTF8",
        ) from None


def _scan_unit(unit, limit):
    """Features of one file or byte range (its first ``limit`` bytes when given): ``(sparse, dense,
    labels_seen)``."""
    sparse, dense = [], {}
    labels_seen = np.array([1 << 30, -1], np.int64)
    tables = [build_name_table(sparse), build_name_table([])]

    def scan(buf, filled, at_end, base):
        last = last_newline(buf, filled)
        cut = filled if at_end else last + 1  # whole lines only, unless the file ended
        pos = 0
        while pos < cut:
            pos, kind, a, b, width = scan_names(buf, pos, cut, *tables[0], *tables[1], labels_seen)
            if kind == 0:
                break
            raw = buf[a:b]
            if len(sparse) + len(dense) >= MAX_FEATURES or (raw < 32).any():
                raise DataError(
                    f"a feature name with control bytes, or more than {MAX_FEATURES} names;",
                    source=unit.url,
                    offset=base + a,
                    text=raw.tobytes().decode("utf-8", "replace")[:80],
                    kind="NOT_TEXT",
                    expected="a text sample file (is this a pb or binary file read as text?)",
                )
            name = _utf8_name(raw, unit, base + a, "(is this a binary file read as text?)")
            if kind == 1:
                sparse.append(name)
                tables[0] = build_name_table(sparse)
            else:
                dense[name] = int(width)
                tables[1] = build_name_table(list(dense))
        return cut

    span = None
    if not unit.aligned:
        with unit.open() as f:
            span = range_span(f, unit)
    _scan_file(unit, limit, scan, span)
    return sparse, dense, labels_seen


def scan_text_features(units, threads=1, limit=None):
    """``FoundFeatures`` of text work units (whole files, byte ranges, Kafka partitions), scanned in parallel
    threads."""
    with concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
        found = list(pool.map(lambda u: _scan_unit(u, limit), units))
    sparse, dense = [], {}
    lo, hi = 1 << 30, -1
    for (sp, dn, labels_seen), unit in zip(found, units):
        for name in sp:
            if name not in sparse:
                sparse.append(name)
        for name, width in dn.items():
            if dense.setdefault(name, width) != width:
                raise DataError(
                    f"dense feature {name!r} has {width} floats here and {dense[name]} elsewhere;",
                    source=unit.url,
                    offset=0,
                    text=name,
                    expected="one width per dense feature",
                    kind="DENSE_WIDTH",
                )
        lo, hi = min(lo, int(labels_seen[0])), max(hi, int(labels_seen[1]))
    return FoundFeatures(
        [(n, 0) for n in sparse], {n: (w, 0) for n, w in dense.items()}, max(lo, 0) if hi >= 0 else 0, max(hi, 0)
    )


def _scan_records_unit(unit, simple, limit):
    """Features of one pb/spb file (first ``limit`` bytes): ``(features [(kind, name, table, width)], labels_seen)``."""
    features = []
    labels_seen = np.array([1 << 30, -1], np.int64)
    found = np.zeros(5, np.int64)
    known = [build_name_table([]), np.empty(0, np.int64), np.empty(0, np.int64)]

    def scan(buf, filled, at_end, base):
        if base == 0 and (problem := framing_problem(buf[: min(filled, 16)], unit.size, simple)):
            message = "SampleSimple" if simple else "SampleGroup"
            raise DataError(
                f"does not look like length-prefixed {message} records: {problem};",
                source=unit.url,
                offset=0,
                text=bytes(buf[: min(filled, 8)]).hex(" "),
                kind="NOT_RECORDS",
                expected=f"a {'spb' if simple else 'pb'} file (is it text? then the format is txt)",
            )
        pos = 0
        while True:
            pos = scan_record_names(buf, pos, filled, simple, *known[0], known[1], known[2], labels_seen, found)
            if found[0] == 0:
                return pos  # the end of the last whole record
            kind, a, b, table, width = (int(v) for v in found)
            name = _utf8_name(buf[a:b], unit, base + a)
            if kind == 3:
                raise DataError(
                    f"feature {name!r} appears in more than one table or with two types;",
                    source=unit.url,
                    offset=base + a,
                    text=name,
                    expected="each feature name in one table with one type (text holds one)",
                    kind="FEATURE_CONFLICT",
                )
            features.append((kind, name, table, width))
            known[:] = [
                build_name_table([f[1] for f in features]),
                np.array([f[0] for f in features], np.int64),
                np.array([f[2] for f in features], np.int64),
            ]

    _scan_file(unit, limit, scan)
    return features, labels_seen


def scan_record_features(units, simple, threads=1, limit=None):
    """``FoundFeatures`` of pb/spb work units (whole files, Kafka partitions), scanned in parallel threads."""
    with concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
        found = list(pool.map(lambda u: _scan_records_unit(u, simple, limit), units))
    sparse, dense, where = [], {}, {}
    lo, hi = 1 << 30, -1
    for (features, labels_seen), unit in zip(found, units):
        for kind, name, table, width in features:
            other_width = kind == 2 and dense.get(name, (width,))[0] != width
            if where.setdefault(name, (kind, table)) != (kind, table) or other_width:
                raise DataError(
                    f"feature {name!r} differs between files (table, type or width);",
                    source=unit.url,
                    offset=0,
                    text=name,
                    expected="one table, type and width per feature",
                    kind="FEATURE_CONFLICT",
                )
            if kind == 1 and (name, table) not in sparse:
                sparse.append((name, table))
            elif kind == 2:
                dense[name] = (width, table)
        lo, hi = min(lo, int(labels_seen[0])), max(hi, int(labels_seen[1]))
    return FoundFeatures(sparse, dense, max(lo, 0) if hi >= 0 else 0, max(hi, 0))


def scan_features(units, file_type, threads=1, limit=None):
    """``FoundFeatures`` of work units of one format (first ``limit`` bytes of each when given)."""
    if FileType(file_type) is FileType.txt:
        return scan_text_features(units, threads, limit)
    return scan_record_features(units, FileType(file_type) is FileType.spb, threads, limit)


def names_in(unit, file_type, limit=4 << 20):
    """The feature names in the first ``limit`` bytes of one work unit (a file or a Kafka partition), each with
    its place: ``{name: ("sparse" or "dense", table)}``."""
    if FileType(file_type) is FileType.txt:
        sparse, dense, _ = _scan_unit(unit, limit)
        return {**{name: ("sparse", 0) for name in sparse}, **{name: ("dense", 0) for name in dense}}
    features, _ = _scan_records_unit(unit, FileType(file_type) is FileType.spb, limit)
    return {name: ("sparse" if kind == 1 else "dense", table) for kind, name, table, _ in features}
