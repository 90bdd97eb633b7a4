"""The work units of a list of paths: files (whole, or byte ranges) and Kafka partitions, in the given order."""
import dataclasses
import os

from .files import expand_paths, plan_units
from .kafka import KafkaOptions, is_kafka, kafka_units

__all__ = ["plan_paths"]


def plan_paths(paths, *, splittable, compression=None, task_num=1, unit_bytes=None, kafka=None):
    """Work units of every path of ``paths`` in order (indices from 0): the files of a path (byte ranges of large
    uncompressed ones when ``splittable``, as ``plan_units``), the partitions of a ``kafka://`` URL (``kafka``: the
    reader's ``KafkaOptions``)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    units, files = [], []

    def flush():
        if files:
            planned = plan_units(expand_paths(files), compression=compression, splittable=splittable,
                                 task_num=task_num, unit_bytes=unit_bytes)
            first = len(units)
            units.extend(dataclasses.replace(u, index=first + i) for i, u in enumerate(planned))
            files.clear()

    for path in map(os.fspath, paths):
        if is_kafka(path):
            flush()
            units.extend(kafka_units(path, kafka or KafkaOptions(), len(units)))
        else:
            files.append(path)
    flush()
    return units
