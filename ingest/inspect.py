"""``ingest inspect``: tables, features, counts and the first samples of any sample file."""
from .convert import format_of
from .discover import scan_features
from .reader import DataReader
from .sources import expand_paths

__all__ = ["inspect"]


def inspect(path, n=3, file_type=None):
    """Summary of a sample file (or directory, glob, URL) as a dict.

    ``format``, ``files``, ``bytes``, ``label_count``, ``tables`` (per table its features
    with type and dense width), ``groups``, ``samples`` and ``first`` (the first ``n``
    samples: id, labels, timestamp and every feature's ids/values or vector, aux features
    resolved through ``refer``).
    """
    files = expand_paths([path])
    ftype = format_of(files[0][0], file_type)
    features = scan_features(files, ftype)
    declared = features.declarations()
    reader = DataReader("inspect", paths=[path], file_type=ftype).label_count(features.label_count)
    for name, kind, table, nvec in declared:
        reader.feature(name=name, type=kind, table=table, nvec=nvec, serialized=True)
    first = []
    with reader:
        reader.startup()
        for batch in reader:
            rows = min(n - len(first), batch.size)
            for r in range(rows):
                first.append(_sample(batch, r))
        stats = reader.stats()
    tables = max([t for _, _, t, _ in declared] + [0]) + 1
    return {
        "path": path, "format": ftype.value, "files": len(files), "bytes": sum(s or 0 for _, s in files),
        "label_count": features.label_count, "groups": stats["groups"], "samples": stats["samples"],
        "tables": [[{"name": name, "type": kind, **({"nvec": nvec} if nvec else {})}
                    for name, kind, t, nvec in declared if t == k] for k in range(tables)],
        "first": first,
    }


def _floats(values):
    """float32 values as the shortest Python floats that name them (0.1, not 0.10000000149...)."""
    return [float(str(v)) for v in values]


def _sample(batch, r):
    rows = [r]
    for ind in batch.indicators:
        rows.append(int(ind[rows[-1]]))
    out = {"sample_id": batch.sample_id(r).decode("utf-8", "replace"), "labels": _floats(batch.labels[r]),
           "timestamp": int(batch.timestamps[r])}
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
