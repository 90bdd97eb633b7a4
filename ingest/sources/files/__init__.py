"""Files as a source: any fsspec URL (local paths, ``file://``, ``hdfs://``...), whole or in byte ranges."""

from .source import MANIFEST, FileRange, FileSource, expand_paths, open_file, plan_units
from .streams import FileStream, RangeStream, ReadAhead

__all__ = [
    "FileRange",
    "FileSource",
    "MANIFEST",
    "FileStream",
    "RangeStream",
    "ReadAhead",
    "expand_paths",
    "open_file",
    "plan_units",
]
