"""ingest: high-throughput sample ingestion for sparse CTR / recommendation training."""

from . import dsl, features, ops
from .batch import Batch, InvalidBatchError, SparseFeature
from .dsl import load_feature_conf
from .errors import (
    ConfigError,
    DataError,
    DslError,
    DslLimitError,
    GroupTooLargeError,
    IngestError,
    OpError,
    ReaderClosedError,
    SourceError,
    StateError,
    TextParseError,
    UnseenFeatureWarning,
)
from .convert import convert
from .formats import FileType as parsers
from .formats.protobuf import ProtobufDecodeError
from .inspect import inspect
from .reader import DataReader

__all__ = [
    "DataReader",
    "Batch",
    "SparseFeature",
    "features",
    "dsl",
    "parsers",
    "convert",
    "inspect",
    "load_feature_conf",
    "IngestError",
    "ConfigError",
    "DslError",
    "SourceError",
    "DataError",
    "TextParseError",
    "ProtobufDecodeError",
    "DslLimitError",
    "GroupTooLargeError",
    "ReaderClosedError",
    "InvalidBatchError",
    "StateError",
    "OpError",
    "UnseenFeatureWarning",
    "ops",
]
__version__ = "0.1.0"
