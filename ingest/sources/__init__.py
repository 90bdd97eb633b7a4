"""Sources: listing inputs, cutting them into work units, sharding, opening them as byte streams.

Any fsspec URL works for files (local paths, ``file://``, ``hdfs://``...), opened through
``filesystems.url_to_fs`` (``hdfs.py`` picks the HDFS client).  A work unit is a whole file, a byte
range of an uncompressed file (the format decides how a range is aligned to record, for text group,
boundaries) or a Kafka partition; ``plan.plan_paths`` makes them for a list of paths.
"""
from .files import WorkUnit, expand_paths, open_unit, plan_units, read_into
from .hdfs import hdfs_client, use_hdfs_client

__all__ = ["WorkUnit", "expand_paths", "hdfs_client", "open_unit", "plan_units", "read_into", "use_hdfs_client"]
