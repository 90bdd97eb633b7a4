"""Slow, obviously correct twins of the numba kernels, written from FORMATS.md alone.

Nothing here imports ``ingest``: the twins are compared with the kernels on generated
inputs in the tests.
"""

import re

import numpy as np

INT_RE = re.compile(rb"[+-]?[0-9]+\Z")
FLOAT_RE = re.compile(rb"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
SPECIAL_RE = re.compile(rb"[+-]?(inf|infinity|nan)\Z", re.IGNORECASE)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def parse_int(tok):
    """int, or 'bad' / 'overflow'."""
    if not INT_RE.match(tok):
        return "bad"
    v = int(tok)
    if not INT64_MIN <= v <= INT64_MAX:
        return "overflow"
    return v


def parse_float(tok):
    """float32 value, or None when ``tok`` is not a decimal float."""
    if FLOAT_RE.match(tok) or SPECIAL_RE.match(tok):
        with np.errstate(over="ignore"):
            return np.float32(float(tok))
    return None


class LineError(Exception):
    def __init__(self, code, field, feature=None):
        super().__init__(code)
        self.code = code
        self.field = field
        self.feature = feature


def _group_id(line):
    parts = line.split(b"|", 2)
    return parts[1] if len(parts) == 3 else None


def parse_line(line, sparse, dense, label_count):
    """One sample from one line (no newline, no trailing CR), or raise LineError.

    ``sparse``: {name: cutoff}; ``dense``: {name: (nvec, mask or None)}.
    """
    fields = line.split(b"|")
    if len(fields) < 5:
        raise LineError("TOO_FEW_FIELDS", "line")
    if len(fields) > 6:
        raise LineError("TOO_MANY_FIELDS", "line")
    sample = {"sid": fields[0], "gid": fields[1], "sparse": {n: [] for n in sparse}, "dense": {}, "labels": [], "ts": 0}
    if fields[2]:
        for entry in fields[2].split(b";"):
            if b"@" not in entry:
                raise LineError("MISSING_AT", "sparse")
            name, toks = entry.split(b"@", 1)
            name = name.decode("utf-8", "replace")
            if name not in sparse:
                continue
            for tok in toks.split(b","):
                if tok == b"":
                    raise LineError("EMPTY_TOKEN", "sparse", name)
                key, sep, val = tok.partition(b":")
                k = parse_int(key)
                if k == "bad":
                    raise LineError("BAD_KEY", "sparse", name)
                if k == "overflow":
                    raise LineError("KEY_OVERFLOW", "sparse", name)
                v = np.float32(1.0)
                if sep:
                    v = parse_float(val)
                    if v is None:
                        raise LineError("BAD_VALUE", "sparse", name)
                sample["sparse"][name].append((k, v))
    if fields[3]:
        for entry in fields[3].split(b";"):
            if b"@" not in entry:
                raise LineError("MISSING_AT", "dense")
            name, toks = entry.split(b"@", 1)
            name = name.decode("utf-8", "replace")
            if name not in dense:
                continue
            if name in sample["dense"]:
                raise LineError("DENSE_REPEATED", "dense", name)
            vals = []
            for tok in toks.split(b","):
                v = parse_float(tok)
                if v is None:
                    raise LineError("BAD_DENSE", "dense", name)
                vals.append(v)
            nvec, mask = dense[name]
            if len(vals) != nvec:
                raise LineError("DENSE_WIDTH", "dense", name)
            if mask is not None:
                vals = [v for v, m in zip(vals, mask) if m == "1"]
            sample["dense"][name] = vals
    labels = []
    if fields[4]:
        for tok in fields[4].split(b","):
            v = parse_float(tok)
            if v is None:
                raise LineError("BAD_LABEL", "labels")
            labels.append(v)
    if len(labels) < label_count:
        raise LineError("TOO_FEW_LABELS", "labels")
    sample["labels"] = labels[:label_count]
    if len(fields) == 6 and fields[5]:
        ts = parse_int(fields[5])
        if isinstance(ts, str):
            raise LineError("BAD_TIMESTAMP", "timestamp")
        sample["ts"] = ts
    for name, cut in sparse.items():
        pairs = sample["sparse"][name]
        if cut > 0:
            sample["sparse"][name] = pairs[:cut]
        elif cut < 0:
            sample["sparse"][name] = pairs[cut:]
    for name, (nvec, mask) in dense.items():
        if name not in sample["dense"]:
            width = nvec if mask is None else mask.count("1")
            sample["dense"][name] = [np.float32(0)] * width
    return sample


def parse_text(data, sparse, dense, label_count, max_group_size=8192):
    """All samples of a text file and the errors of its bad lines.

    Returns ``(samples, errors)``: each sample has a ``group`` number (groups that lost
    every line to errors do not count); each error is ``(line number, code, field)``.
    """
    samples, errors = [], []
    prev = None
    has_prev = False
    group = -1
    group_lines = 0
    group_has_rows = False
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for number, line in enumerate(lines, 1):
        if line.endswith(b"\r"):
            line = line[:-1]
        if line == b"":
            continue
        gid = _group_id(line)
        if (
            not has_prev
            or gid is None
            or prev is None
            or gid == b""
            or prev == b""
            or gid != prev
            or group_lines >= max_group_size
        ):
            if group < 0 or group_has_rows:
                group += 1
            group_lines = 0
            group_has_rows = False
        group_lines += 1
        prev, has_prev = gid, True
        try:
            sample = parse_line(line, sparse, dense, label_count)
        except LineError as err:
            errors.append((number, err.code, err.field))
            continue
        sample["group"] = group
        group_has_rows = True
        samples.append(sample)
    return samples, errors
