"""Parquet files of samples for ``ingest convert`` (docs/formats.md, Arrow and Parquet).

Written from a reader's batches (``Batch.to_arrow``: one row per sample, zstd pages, a row group per batch of
``ROW_GROUP_ROWS`` samples); read back, by ingest's or another tool's files of the same column conventions,
into the Blocks the converter's writers take (``block_from_arrow``).
"""

from enum import Enum

import pyarrow as pa
import pyarrow.parquet as pq

from .arrow import arrow_features, block_from_arrow, list_widths, record_schema
from .discover import FoundFeatures
from .errors import ConfigError, SourceError
from .formats import FileType, format_of
from .reader import DataReader
from .sources.compression import infer_compression, strip_suffix
from .sources.filesystems import url_to_fs

__all__ = [
    "Parquet",
    "ROW_GROUP_ROWS",
    "format_or_parquet",
    "scan_parquet",
    "parquet_blocks",
    "write_parquet",
    "refuse_compressed",
]

ROW_GROUP_ROWS = 65536  # samples per batch read, so per row group written


class Parquet(str, Enum):
    """The table format ``ingest convert`` writes and reads beside the sample formats (``FileType``)."""

    parquet = "parquet"


def format_or_parquet(url, given=None):
    """``Parquet.parquet`` for ``given == "parquet"`` or a ``.parquet`` name, else ``formats.format_of``."""
    if given == "parquet" or (given is None and url.lower().endswith(".parquet")):
        return Parquet.parquet
    if given is None and strip_suffix(url.lower()).endswith(".parquet"):
        refuse_compressed(url)
    try:
        return format_of(url, given)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (or parquet)") from None


class _Sink:
    """The file object ``ParquetWriter`` writes through: ``write(bytes)`` of the converter's output."""

    def __init__(self, write):
        self._write = write
        self.position = 0
        self.closed = False

    def write(self, data):
        self._write(data)
        self.position += len(data)
        return len(data)

    def tell(self):
        return self.position

    def flush(self):
        pass

    def close(self):
        self.closed = True


def write_parquet(files, src, features, threads, write, progress=None):
    """Write the samples of ``files`` (``[(url, size)]`` of format ``src``, holding ``features``, a
    ``FoundFeatures``) to ``write`` as one Parquet file; returns the samples written.

    Text ids are declared ``serialized=True`` (int64 ids, wrapped as they are); pb/spb ids as ``(hkey, key)``
    pairs, so that a 128-bit id is refused by ``to_arrow`` rather than cut to its key.
    """
    reader = DataReader("convert", [url for url, _ in files], file_type=src)
    reader.batch_size(ROW_GROUP_ROWS).label_count(features.label_count).pad(False).threads(threads)
    reader.deterministic(True)  # the input's order
    for name, kind, table, nvec in features.declarations():
        reader.feature(name, kind, table=table, nvec=nvec, serialized=src is FileType.txt)
    writer = pq.ParquetWriter(_Sink(write), record_schema(reader.schema), compression="zstd")
    rows = read = 0
    with reader.startup():
        for batch in reader:
            writer.write_batch(batch.to_arrow(), row_group_size=ROW_GROUP_ROWS)
            rows += batch.size
            batch.release()
            if progress is not None:
                done = reader.stats()["bytes"]
                progress.update(done - read)
                read = done
    writer.close()
    return rows


def _open(url):
    """``(file, ParquetFile)`` of a Parquet input; a ``SourceError`` naming it when it is not Parquet."""
    fs, path = url_to_fs(url)
    f = fs.open(path, "rb")
    try:
        return f, pq.ParquetFile(f)
    except (pa.ArrowInvalid, OSError) as exc:
        f.close()
        raise SourceError(f"{url}: not a Parquet file ({exc})", source=url) from None


def _first_widths(url, parquet_file, columns):
    """The list length of the first row of each of ``columns`` (variable lists), or {} for a file of no rows."""
    if not columns or parquet_file.metadata.num_rows == 0:
        return {}
    first = parquet_file.read_row_group(0, columns=columns).slice(0, 1)
    return {name: int(list_widths(first.column(name).combine_chunks())[0]) for name in columns}


def scan_parquet(files) -> FoundFeatures:
    """The features of Parquet files (``[(url, size)]``), in order of first appearance, with their dense widths
    and the label width: from a fixed_size_list type, else from the first row of the file."""
    sparse: list = []
    dense: dict = {}
    labels = []
    for url, _ in files:
        f, parquet_file = _open(url)
        try:
            file_sparse, file_dense, file_labels = arrow_features(parquet_file.schema_arrow, url)
            unknown = [name for name, width in file_dense.items() if width is None]
            widths = _first_widths(url, parquet_file, unknown + (["labels"] if file_labels is None else []))
        finally:
            f.close()
        sparse += [(name, 0) for name in file_sparse if (name, 0) not in sparse]
        for name, width in file_dense.items():
            width = widths.get(name) if width is None else width
            if width is None:
                continue
            if name in dense and dense[name][0] != width:
                raise ConfigError(f"{url}: column {name!r} holds {width} numbers a row, another input {dense[name][0]}")
            dense.setdefault(name, (width, 0))
        file_labels = widths.get("labels") if file_labels is None else file_labels
        if file_labels is not None:
            labels.append(file_labels)
    clash = {name for name, _ in sparse} & set(dense)
    if clash:
        raise ConfigError(f"{files[0][0]}: {sorted(clash)} are sparse features in one input and dense in another")
    return FoundFeatures(sparse, dense, min(labels, default=0), max(labels, default=0))


def parquet_blocks(files, schema, progress=None):
    """The Blocks of Parquet files (``[(url, size)]``) over ``schema``, ``ROW_GROUP_ROWS`` samples at a time; a
    row whose lists do not fit ``schema`` is a ``ConfigError`` naming the file, the column and the row."""
    for url, size in files:
        f, parquet_file = _open(url)
        try:
            arrow_features(parquet_file.schema_arrow, url)
            total = max(parquet_file.metadata.num_rows, 1)
            first = 0
            for record_batch in parquet_file.iter_batches(batch_size=ROW_GROUP_ROWS):
                yield block_from_arrow(record_batch, schema, url, first)
                first += record_batch.num_rows
                if progress is not None:
                    progress.update((size or 0) * record_batch.num_rows // total)
        finally:
            f.close()


def refuse_compressed(url):
    """A ConfigError for a Parquet output named with a compression suffix (Parquet compresses its pages)."""
    if infer_compression(url):
        raise ConfigError(f"{url}: Parquet compresses its own pages; name it without {url[len(strip_suffix(url)) :]}")
