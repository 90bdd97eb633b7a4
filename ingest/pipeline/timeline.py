"""A timeline of one reader run as a Chrome trace (chrome://tracing, Perfetto): a track per thread.

Events are complete spans (``"ph": "X"``), one per chunk read and parsed, op run, batch built,
unique-id pass and consumer wait, with their sizes as arguments; they are recorded per chunk
or batch, never per sample.
"""

import json
import os
import threading
import time

__all__ = ["Timeline"]


class Timeline:
    def __init__(self):
        self._lock = threading.Lock()
        self._events = []
        self._threads = {}
        self._origin = time.perf_counter()

    def span(self, name, start, end, args=None):
        """Record ``name`` from ``start`` to ``end`` (``perf_counter`` seconds) on the calling thread's track."""
        thread = threading.current_thread()
        event = {
            "name": name,
            "ph": "X",
            "pid": os.getpid(),
            "tid": thread.ident,
            "ts": (start - self._origin) * 1e6,
            "dur": (end - start) * 1e6,
        }
        if args:
            event["args"] = args
        with self._lock:
            self._threads.setdefault(thread.ident, thread.name)
            self._events.append(event)

    def events(self):
        """The trace events: thread names first, then the spans in time order."""
        with self._lock:
            names = [
                {"name": "thread_name", "ph": "M", "pid": os.getpid(), "tid": tid, "args": {"name": name}}
                for tid, name in self._threads.items()
            ]
            spans = sorted(self._events, key=lambda e: e["ts"])
        return names + spans

    def write(self, path):
        """Write the Chrome trace JSON to ``path`` (through a temporary name, then renamed)."""
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump({"traceEvents": self.events(), "displayTimeUnit": "ms"}, f)
        os.replace(tmp, path)
