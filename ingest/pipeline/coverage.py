"""Declared features the input never holds (a typo, or the wrong table): found per epoch, reported when it ends.

A sparse feature is seen in a block when one of its rows has a value, a dense one when one of its values is not
zero (an absent dense feature is a zero row).  Once every feature has been seen in an epoch, a block costs one
set lookup; until then, one look at each table's offsets and at each unseen dense feature's values.
"""

import difflib
import threading
import warnings
from collections import Counter

import numpy as np

from ..discover import names_in
from ..errors import IngestError, UnseenFeatureWarning

__all__ = ["Coverage"]


class Coverage:
    """Which declared features of ``schema`` (its parsed ones) the blocks of each epoch hold; ``declared``: every
    name the reader declares (DSL features too), left out of the names a warning suggests.

    ``unit_done(epoch)`` after the last block of each unit; an epoch ends when ``units`` of them are done, and
    ``ended()`` hands out, once, ``(epoch, names never seen, samples)`` of each ended epoch that missed some.
    """

    def __init__(self, schema, units, declared):
        self.units = units
        self.declared = frozenset(declared)
        # per table, the positions (in self.names) of its sparse features and of its dense ones, in block order
        self.names = []
        self.tables = []
        self.places = {s.name: ("sparse", s.table) for s in schema.sparse}
        self.places.update({s.name: ("dense", s.table) for s in schema.dense})
        for t in range(schema.tables):
            sparse = np.array([self._number(s.name) for s in schema.sparse_in(t)], np.int64)
            dense = [self._number(s.name) for s in schema.dense_in(t)]
            self.tables.append((sparse, dense))
        self._lock = threading.Lock()
        self._seen = {}
        self._complete = set()  # epochs that have seen every feature: a block then costs a set lookup
        self._samples = Counter()
        self._done = Counter()
        self.epochs_ended = []  # (epoch, names missed, samples) of the ended epochs that missed some, until ended()
        self.never_seen = None  # names missed by every epoch ended so far

    def _number(self, name):
        self.names.append(name)
        return len(self.names) - 1

    def add(self, epoch, blk):
        with self._lock:
            self._samples[epoch] += blk.nrows
            if epoch in self._complete:
                return
            seen = self._seen.get(epoch)
            if seen is None:
                seen = self._seen[epoch] = np.zeros(len(self.names), np.bool_)
        for (sparse, dense), table in zip(self.tables, blk.tables):
            if len(sparse):
                offsets = table.sp_offsets  # only ever set to True: parse workers share ``seen``
                seen[sparse[offsets[:, -1] > offsets[:, 0]]] = True
            for d, f in enumerate(dense):
                if not seen[f] and table.dense[d].any():
                    seen[f] = True
        if seen.all():
            with self._lock:
                self._complete.add(epoch)

    def unit_done(self, epoch):
        with self._lock:
            self._done[epoch] += 1
            if self._done[epoch] != self.units:
                return
            seen = self._seen.pop(epoch, np.zeros(len(self.names), np.bool_))
            self._complete.discard(epoch)
            missed = [n for n, s in zip(self.names, seen) if not s]
            self.never_seen = missed if self.never_seen is None else [n for n in self.never_seen if n in missed]
            if missed and self._samples[epoch]:  # an epoch of no samples says nothing of its features
                self.epochs_ended.append((epoch, missed, self._samples[epoch]))

    def ended(self):
        """``[(epoch, names, samples)]`` of the epochs that ended since the last call missing some features."""
        if not self.epochs_ended:  # no lock while there is nothing (the reader looks before every batch)
            return []
        with self._lock:
            out, self.epochs_ended = self.epochs_ended, []
        return out

    def warn_unseen(self, reader, units, file_type):
        """An ``UnseenFeatureWarning`` for each declared feature an epoch that ended never held, with where the
        input has it when that is another type or table, else the closest name of an undeclared feature in the
        input (both from the first 4 MiB of the first work unit, ``units[0]``)."""
        ended = self.ended()
        if not ended:
            return
        try:
            present = names_in(units[0], file_type)
        except IngestError:
            present = {}
        for epoch, names, samples in ended:
            for name in names:
                if name in present and present[name] != self.places[name]:
                    hint = f"; the input has it as {_place(*present[name])}, not {_place(*self.places[name])}"
                else:
                    close = difflib.get_close_matches(name, [p for p in present if p not in self.declared], n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                warnings.warn(
                    f"reader {reader!r}: feature {name!r} was declared but never seen in {samples:,} "
                    f"samples (epoch {epoch}){hint}",
                    UnseenFeatureWarning,
                    stacklevel=4,
                )


def _place(kind, table):
    return f"a {kind} feature" + (f" of table {table}" if table else "")
