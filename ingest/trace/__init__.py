"""Trace files: what the model saw per step, in XDL's trace format (FORMATS.md section 8, docs/trace.md).

``TraceWriter`` writes records of named arrays, ``DataReader.trace`` adds each batch's to it, ``read`` and
``meta`` read them back; ``ingest trace show`` and ``ingest trace to-parquet`` on the command line.
"""

from .files import TraceFileError, meta, read
from .writer import TraceWriter

__all__ = ["TraceWriter", "TraceFileError", "read", "meta"]
