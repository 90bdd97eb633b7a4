"""Test-side protobuf tools: a wire encoder with every legal variation, and the reference samples.

``encode`` writes a message as any conforming writer may: repeated scalars packed or not
(or split over several packed runs), fields of different numbers interleaved, unknown
fields of every wire type (groups included) anywhere.  The protobuf library parses the
result back, which proves the bytes legal, and ``expected_samples`` turns parsed messages
into the samples a reader must deliver: the slow twin of ``native/protobuf.py``.
"""

import struct

from google.protobuf.descriptor import FieldDescriptor as FD

_VARINT_TYPES = {FD.TYPE_INT64, FD.TYPE_INT32, FD.TYPE_ENUM, FD.TYPE_UINT64, FD.TYPE_UINT32, FD.TYPE_BOOL}


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field, wire_type):
    return varint(field << 3 | wire_type)


def length_delimited(field, payload):
    return tag(field, 2) + varint(len(payload)) + payload


def _scalar(fd, value):
    """(wire type, bytes) of one scalar value."""
    if fd.type in _VARINT_TYPES:
        return 0, varint(int(value))
    if fd.type == FD.TYPE_FLOAT:
        return 5, struct.pack("<f", value)
    if fd.type in (FD.TYPE_STRING, FD.TYPE_BYTES):
        data = value.encode() if isinstance(value, str) else value
        return 2, varint(len(data)) + data
    raise NotImplementedError(fd.type)


def unknown_field(rng):
    """One field with a number no schema message uses, of a random wire type."""
    number = rng.randint(6, 40)
    kind = rng.choice([0, 1, 2, 3, 5])
    if kind == 0:
        return tag(number, 0) + varint(rng.getrandbits(64))
    if kind == 1:
        return tag(number, 1) + bytes(rng.getrandbits(8) for _ in range(8))
    if kind == 5:
        return tag(number, 5) + bytes(rng.getrandbits(8) for _ in range(4))
    if kind == 2:
        return length_delimited(number, bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 6))))
    inner = unknown_field(rng) if rng.random() < 0.5 else b""
    return tag(number, 3) + inner + tag(number, 4)


def encode(msg, rng, unknown=0.2):
    """Serialize ``msg`` with random legal variations drawn from ``rng`` (a ``random.Random``)."""
    runs = []  # per field: its encoded occurrences, in order
    for fd, value in msg.ListFields():
        items = []
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            for k, v in value.items():
                entry = length_delimited(1, k.encode()) + length_delimited(2, v.encode())
                items.append(length_delimited(fd.number, entry))
        elif fd.message_type is not None:
            for m in value if fd.is_repeated else [value]:
                items.append(length_delimited(fd.number, encode(m, rng, unknown)))
        elif fd.is_repeated and fd.type in (_VARINT_TYPES | {FD.TYPE_FLOAT}) and rng.random() < 0.5:
            values = list(value)
            cut = rng.randint(0, len(values))
            for part in (values[:cut], values[cut:]) if rng.random() < 0.5 else (values,):
                if part:
                    items.append(length_delimited(fd.number, b"".join(_scalar(fd, v)[1] for v in part)))
        else:
            for v in value if fd.is_repeated else [value]:
                wt, data = _scalar(fd, v)
                items.append(tag(fd.number, wt) + data)
        runs.append(items)
    out = []
    while any(runs):  # interleave fields, keeping each field's own order
        run = rng.choice([r for r in runs if r])
        out.append(run.pop(0))
        if rng.random() < unknown:
            out.append(unknown_field(rng))
    return b"".join(out)


def frame(records):
    """Length-prefixed records, as in a pb/spb file."""
    return b"".join(struct.pack("<I", len(r)) + r for r in records)


def unframe(data):
    """The messages of length-prefixed records (``frame``'s inverse); the data must end with a whole record."""
    out, pos = [], 0
    while pos < len(data):
        assert pos + 4 <= len(data)
        (n,) = struct.unpack_from("<I", data, pos)
        assert pos + 4 + n <= len(data)
        out.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return out


def _line_features(line, names_of_table, sparse, dense, cutoff):
    s_out, d_out = {}, {}
    for feat in line.features if line is not None else ():
        if feat.name not in names_of_table:
            continue
        if feat.name in sparse:
            for v in feat.values:
                key = v.key if v.hkey == 0 else (v.hkey, v.key)
                s_out.setdefault(feat.name, []).append((key, v.value if v.HasField("value") else 1.0))
        else:
            nvec, mask = dense[feat.name][:2]
            vec = list(feat.values[0].vector)
            d_out[feat.name] = [x for x, keep in zip(vec, mask or "1" * nvec) if keep == "1"]
    for name, pairs in s_out.items():
        c = cutoff.get(name, 0)
        s_out[name] = pairs[:c] if c > 0 else (pairs[c:] if c < 0 else pairs)
    return s_out, d_out


def expected_samples(records, simple, sparse, dense, label_count, cutoff=None):
    """Samples a reader must deliver for parsed ``records`` (SampleGroup or SampleSimple objects).

    ``sparse`` maps name -> table, ``dense`` maps name -> (nvec, mask, table).
    """
    cutoff = cutoff or {}
    tables = 1 + max([*sparse.values(), *(d[2] for d in dense.values()), 0])
    by_table = [
        {n for n, t in sparse.items() if t == k} | {n for n, d in dense.items() if d[2] == k} for k in range(tables)
    ]
    out = []
    for rec in records:
        if simple:
            rows = [(rec.sample_id.encode(), list(rec.label.values), 0, [rec.feature_line])]
        else:
            rows = []
            data_tables = list(rec.feature_tables)
            exts = list(rec.extensions)
            for i in range(len(rec.labels)):
                sid = rec.sample_ids[i].encode() if rec.sample_ids else b""
                ts = int(exts[i].extension.get("timestamp", "0") or 0) if i < len(exts) else 0
                rows.append((sid, list(rec.labels[i].values), ts, [data_tables[0].feature_lines[i]]))
            for _, _, _, lines in rows:  # follow refer through the aux tables
                for k in range(1, tables):
                    refer = lines[-1].refer if lines[-1] is not None else 0
                    present = k < len(data_tables) and len(data_tables[k].feature_lines) > 0
                    lines.append(data_tables[k].feature_lines[refer] if present else None)
        for sid, labels, ts, lines in rows:
            lines = lines + [None] * (tables - len(lines))
            s = {"sid": sid, "labels": labels[:label_count], "ts": ts, "sparse": {}, "dense": {}}
            for k in range(tables):
                sp, dn = _line_features(lines[k], by_table[k], sparse, dense, cutoff)
                for name in by_table[k]:
                    if name in sparse:
                        s["sparse"][name] = sp.get(name, [])
                    else:
                        s["dense"][name] = dn.get(name, [0.0] * (dense[name][1] or "1" * dense[name][0]).count("1"))
            out.append(s)
    return out


def group_records(groups, main, aux, dense=()):
    """Framed ``SampleGroup`` records of generated groups, as the protobuf library writes them.

    ``groups`` holds ``(samples, aux lines)``: dicts of feature name -> sparse values, as
    ``(key, value)`` or ``(hkey, key, value)`` tuples, or a dense vector for names in ``dense``.
    A sample also gives ``refer`` and may give ``sid``, ``label`` (1.0) and ``ts`` (0: none).
    Canonical choices: a value of 1.0, a high key of 0 and an all-zero vector are left out.
    """
    from ingest import sample_pb2 as pb

    def add(line, name, got):
        if name in dense:
            if any(got):
                line.features.add(type=pb.kDense, name=name).values.add().vector.extend(got)
        elif got:
            f = line.features.add(type=pb.kSparse, name=name)
            for entry in got:
                h, k, v = entry if len(entry) == 3 else (0, *entry)
                fv = f.values.add(key=k)
                if v != 1.0:
                    fv.value = v
                if h:
                    fv.hkey = h

    records = []
    for samples, aux_lines in groups:
        g = pb.SampleGroup()
        t0, t1 = g.feature_tables.add(), g.feature_tables.add()
        with_ts = any(s.get("ts") for s in samples)
        for s in samples:
            if s.get("sid") is not None:
                g.sample_ids.append(s["sid"])
            g.labels.add().values.append(s.get("label", 1.0))
            line = t0.feature_lines.add(refer=s["refer"])
            for name in main:
                add(line, name, s[name])
            if with_ts:
                g.extensions.add().extension["timestamp"] = str(s.get("ts", 0))
        for a in aux_lines:
            line = t1.feature_lines.add()
            for name in aux:
                add(line, name, a[name])
        records.append(g.SerializeToString())
    return frame(records)
