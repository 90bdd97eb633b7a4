"""ingest: high-throughput sample ingestion for sparse CTR / recommendation training."""
from . import features
from .batch import Batch, InvalidBatchError, SparseFeature
from .errors import (ConfigError, DataError, GroupTooLargeError, IngestError, ReaderClosedError,
                     SourceError, TextParseError)
from .convert import convert
from .formats import FileType as parsers
from .formats.protobuf import ProtobufDecodeError
from .inspect import inspect
from .reader import DataReader

__all__ = [
    "DataReader", "Batch", "SparseFeature", "features", "parsers", "convert", "inspect",
    "IngestError", "ConfigError", "SourceError", "DataError", "TextParseError", "ProtobufDecodeError",
    "GroupTooLargeError", "ReaderClosedError", "InvalidBatchError",
]
__version__ = "0.1.0"
