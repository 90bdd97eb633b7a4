"""Reader statistics: counters and stage times, updated per chunk or batch (never per sample)."""

import threading
import time
from collections import Counter

__all__ = ["Stats"]

KEEP_ERRORS = 100


class Stats:
    """Counters of one reader, safe to update from any thread; ``snapshot()`` is what ``reader.stats()`` returns.

    Each thread counts into dicts of its own, summed by ``snapshot()``: the pipeline's threads update them several
    times a batch, and one lock for all of them made those updates wait for each other.
    """

    def __init__(self, timeline=None):
        self.timeline = timeline
        self._lock = threading.Lock()
        self._threads = []  # (counts, times) of every thread that counted
        self._local = _ThreadCounts(self._threads, self._lock)
        self._skipped_by_kind = Counter()
        self._first_errors = []
        self._started = None

    def start_clock(self):
        self._started = time.perf_counter()

    def add(self, **counts):
        mine = self._local.counts
        for name, n in counts.items():
            mine[name] = mine.get(name, 0) + n

    def stage(self, stage, start, end, **args):
        """Count ``end - start`` seconds (``perf_counter``) to ``stage``, and record it on the timeline."""
        times = self._local.times
        times[stage] = times.get(stage, 0.0) + (end - start)
        timeline = self.timeline  # read once: end_timeline() may clear it meanwhile, from another thread
        if timeline is not None:
            timeline.span(stage, start, end, args)

    def end_timeline(self):
        """Close the timeline (its last file ended, the writer stopped), once; a ``SourceError`` if unwritable."""
        if self.timeline is not None:
            timeline, self.timeline = self.timeline, None
            timeline.close()

    def skipped(self, error):
        """Count an error whose line, record or group was skipped under ``on_error("skip")``."""
        self.add(errors_skipped=1)
        with self._lock:
            self._skipped_by_kind[getattr(error, "kind", type(error).__name__)] += 1
            if len(self._first_errors) < KEEP_ERRORS:
                self._first_errors.append(str(error))

    def snapshot(self):
        """A plain dict: counts, ``errors_skipped`` by kind with the first messages, seconds per stage."""
        counts, times = Counter(), Counter()
        with self._lock:
            for mine_counts, mine_times in self._threads:
                counts.update(dict(mine_counts))  # dict(): one copy under the GIL while the owner goes on counting
                times.update(dict(mine_times))
            out = {
                k: counts.get(k, 0)
                for k in ("bytes", "samples", "groups", "blocks", "batches", "units", "errors_skipped")
            }
            out["errors_by_kind"] = dict(self._skipped_by_kind)
            out["first_errors"] = list(self._first_errors)
            out["seconds"] = {k: round(v, 6) for k, v in times.items()}
            if self._started is not None:
                out["seconds"]["wall"] = round(time.perf_counter() - self._started, 6)
        return out


class _ThreadCounts(threading.local):
    """A thread's ``counts`` and ``times`` dicts, made (and listed in ``threads``) when the thread first counts:
    ``threading.local`` runs ``__init__`` once in each thread, so a count is an attribute read, not a call."""

    def __init__(self, threads, lock):
        self.counts, self.times = {}, {}
        with lock:
            threads.append((self.counts, self.times))
