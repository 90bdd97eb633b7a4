"""ingest: high-throughput sample ingestion for sparse CTR / recommendation training."""
from . import features
from .batch import Batch, InvalidBatchError, SparseFeature
from .errors import (ConfigError, DataError, GroupTooLargeError, IngestError, ReaderClosedError,
                     SourceError, TextParseError)
from .formats import FileType as parsers
from .reader import DataReader

__all__ = [
    "DataReader", "Batch", "SparseFeature", "features", "parsers",
    "IngestError", "ConfigError", "SourceError", "DataError", "TextParseError",
    "GroupTooLargeError", "ReaderClosedError", "InvalidBatchError",
]
__version__ = "0.1.0"
