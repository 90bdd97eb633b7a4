"""``ingest inspect``: tables, features, counts and the first samples of any sample file."""

from . import warmup
from .formats import format_of
from .discover import scan_features
from .reader import DataReader
from .sources.plan import plan_paths

__all__ = ["inspect"]


def inspect(path, n=3, file_type=None, progress=None):
    """Summary of a sample file (or directory, glob, URL, ``kafka://`` topic) as a dict.

    ``format``, ``files`` (files or partitions), ``bytes``, ``label_count``, ``tables`` (per table its features
    with type and dense width), ``groups``, ``samples`` and ``first`` (the first ``n``
    samples: id, labels, timestamp and every feature's ids/values or vector, aux features
    resolved through ``refer``).  ``progress.update(nbytes)`` is called as the input is read, when given.
    """
    units = plan_paths([path], splittable=False)
    ftype = format_of(units[0].url, file_type, flag="--format")
    parse = "text" if ftype.value == "txt" else "pb"
    warmup.notice([f"scan-{parse}", parse, "batch"], parallel=warmup.ahead(warmup.cold([parse, "batch"])))
    features = scan_features(units, ftype)
    declared = features.declarations()
    reader = DataReader("inspect", paths=[path], file_type=ftype).label_count(features.label_count)
    for name, kind, table, nvec in declared:
        reader.feature(name=name, type=kind, table=table, nvec=nvec, serialized=True)
    first = []
    with reader:
        reader.startup()
        read = 0
        for batch in reader:
            if progress is not None:
                done = reader.stats()["bytes"]
                progress.update(done - read)
                read = done
            rows = min(n - len(first), batch.size)
            for r in range(rows):
                first.append(_sample(batch, r))
        stats = reader.stats()
    tables = max([t for _, _, t, _ in declared] + [0]) + 1
    return {
        "path": path,
        "format": ftype.value,
        "files": len(units),
        "bytes": sum(u.size or 0 for u in units),
        "label_count": features.label_count,
        "groups": stats["groups"],
        "samples": stats["samples"],
        "tables": [
            [
                {"name": name, "type": kind, **({"nvec": nvec} if nvec else {})}
                for name, kind, t, nvec in declared
                if t == k
            ]
            for k in range(tables)
        ],
        "first": first,
    }


def _floats(values):
    """float32 values as the shortest Python floats that name them (0.1, not 0.10000000149...)."""
    return [float(str(v)) for v in values]


def _sample(batch, r):
    rows = [r]
    for ind in batch.indicators:
        rows.append(int(ind[rows[-1]]))
    out = {
        "sample_id": batch.sample_id(r).decode("utf-8", "replace"),
        "labels": _floats(batch.labels[r]),
        "timestamp": int(batch.timestamps[r]),
    }
    for name in batch:
        feat = batch[name]
        row = rows[batch.table_of(name)]
        if hasattr(feat, "offsets"):
            a, b = feat.offsets[row], feat.offsets[row + 1]
            if b > a:
                out[name] = [[int(k), v] for k, v in zip(feat.ids[a:b], _floats(feat.values[a:b]))]
        elif feat[row].any():
            out[name] = _floats(feat[row])
    return out
