"""Sources: where samples come from, cut into work units a parse worker reads as byte streams.

A ``Source`` (``base.py``) plans the units of the URLs of its schemes and answers for their reader-wide
concerns (a consumer group, commits); ``registry.source_for`` picks it by URL scheme: ``files`` for local paths
and every fsspec protocol (``hdfs.py`` picks the HDFS client), ``kafka`` for ``kafka://`` topics, and those that
other packages register under the ``ingest.sources`` entry point group.  ``plan.plan_paths`` makes the units of
a list of paths; a unit opens itself (``unit.open()``) as a ``UnitStream``.
"""

from .base import Source, Unit, UnitStream, read_into
from .files import FileRange, expand_paths, plan_units
from .hdfs import hdfs_client, use_hdfs_client
from .plan import plan_paths
from .registry import register, scheme_of, source_for

__all__ = [
    "FileRange",
    "Source",
    "Unit",
    "UnitStream",
    "expand_paths",
    "hdfs_client",
    "plan_paths",
    "plan_units",
    "read_into",
    "register",
    "scheme_of",
    "source_for",
    "use_hdfs_client",
]
