"""Reader statistics: counters and stage times, updated per chunk or batch (never per sample)."""

import threading
import time
from collections import Counter

__all__ = ["Stats"]

KEEP_ERRORS = 100


class Stats:
    """Thread-safe counters of one reader; ``snapshot()`` is what ``reader.stats()`` returns."""

    def __init__(self, timeline=None):
        self.timeline = timeline
        self._lock = threading.Lock()
        self._counts = Counter()
        self._times = Counter()
        self._skipped_by_kind = Counter()
        self._first_errors = []
        self._started = None

    def start_clock(self):
        self._started = time.perf_counter()

    def add(self, **counts):
        with self._lock:
            mine = self._counts
            for name, n in counts.items():  # Counter.update takes twice as long, under the GIL, every block
                mine[name] += n

    def stage(self, stage, start, end, **args):
        """Count ``end - start`` seconds (``perf_counter``) to ``stage``, and record it on the timeline."""
        with self._lock:
            self._times[stage] += end - start
        if self.timeline is not None:
            self.timeline.span(stage, start, end, args)

    def end_timeline(self):
        """Close the timeline (its last file ended, the writer stopped), once; a ``SourceError`` if unwritable."""
        if self.timeline is not None:
            timeline, self.timeline = self.timeline, None
            timeline.close()

    def skipped(self, error):
        """Count an error whose line, record or group was skipped under ``on_error("skip")``."""
        with self._lock:
            self._counts["errors_skipped"] += 1
            self._skipped_by_kind[getattr(error, "kind", type(error).__name__)] += 1
            if len(self._first_errors) < KEEP_ERRORS:
                self._first_errors.append(str(error))

    def snapshot(self):
        """A plain dict: counts, ``errors_skipped`` by kind with the first messages, seconds per stage."""
        with self._lock:
            out = {
                k: self._counts.get(k, 0)
                for k in ("bytes", "samples", "groups", "blocks", "batches", "units", "errors_skipped")
            }
            out["errors_by_kind"] = dict(self._skipped_by_kind)
            out["first_errors"] = list(self._first_errors)
            out["seconds"] = {k: round(v, 6) for k, v in self._times.items()}
            if self._started is not None:
                out["seconds"]["wall"] = round(time.perf_counter() - self._started, 6)
        return out
