"""The work units of a list of paths, in the given order, each run of paths planned by its source."""

import itertools
import os

from .registry import scheme_of, source_for

__all__ = ["plan_paths", "sources_of"]


def sources_of(paths):
    """``[(source, scheme, urls)]``: ``paths`` in runs of consecutive URLs of one source."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    runs = []
    for source, urls in itertools.groupby(map(os.fspath, paths), source_for):
        urls = list(urls)
        runs.append((source, scheme_of(urls[0]), urls))
    return runs


def plan_paths(paths, *, splittable, compression=None, task_num=1, unit_bytes=None, options=None):
    """Work units of every path of ``paths`` in order (indices from 0).  ``options``: each scheme's source
    options (``ReaderOptions.sources``)."""
    units = []
    for source, scheme, urls in sources_of(paths):
        units.extend(
            source.plan(
                urls,
                splittable=splittable,
                compression=compression,
                task_num=task_num,
                unit_bytes=unit_bytes,
                options=(options or {}).get(scheme),
                first_index=len(units),
            )
        )
    return units
