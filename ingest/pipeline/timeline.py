"""A timeline of one reader run as a Chrome trace (chrome://tracing, Perfetto): a track per thread.

Events are complete spans (``"ph": "X"``), one per chunk read and parsed, op run, batch built,
unique-id pass and consumer wait, with their sizes as arguments; they are recorded per chunk
or batch, never per sample.

They are written as they come, in Chrome's JSON array format, by a background writer (``trace.background``):
``[`` and one event per line, ``]`` once the timeline is closed; a run cut short leaves a file without it,
which Chrome, Perfetto and ``events`` read all the same.  Nothing is kept in memory but the thread names.  A
file is closed before it would pass ``max_file_mb`` MB and the next one started (``run.json``, ``run.1.json``,
``run.2.json``...), each with the thread names of every thread seen so far.
"""

import json
import os
import threading
import time

from ..errors import SourceError
from ..sources.filesystems import open_url
from ..trace.background import MB, BackgroundFiles

__all__ = ["Timeline", "timeline_files", "events"]


def _file_name(path, index):
    """The ``index``-th file of a timeline written to ``path``: ``path`` itself, then ``<stem>.<index><ext>``."""
    if index == 0:
        return str(path)
    stem, ext = os.path.splitext(str(path))
    return f"{stem}.{index}{ext}"


class Timeline:
    """Spans of a run written to ``path`` (any fsspec URL) as they come; ``close()`` ends the last file."""

    def __init__(self, path, max_file_mb=100, queue_depth=256):
        self.path = str(path)
        self._max_bytes = int(max_file_mb * MB)
        self._lock = threading.Lock()
        self._threads = {}  # tid -> its thread_name event (JSON)
        self._named = set()  # the tids whose name the current file holds
        self._origin = time.perf_counter()
        self._pid = os.getpid()
        self._files = BackgroundFiles("timeline", queue_depth)
        self._index = -1
        self._size = 0
        self._first = True
        self.written = 0  # spans written

    def span(self, name, start, end, args=None):
        """Record ``name`` from ``start`` to ``end`` (``perf_counter`` seconds) on the calling thread's track."""
        thread = threading.current_thread()
        event = {
            "name": name,
            "ph": "X",
            "pid": self._pid,
            "tid": thread.ident,
            "ts": (start - self._origin) * 1e6,
            "dur": (end - start) * 1e6,
        }
        if args:
            event["args"] = args
        line = json.dumps(event)
        tid = thread.ident
        with self._lock:
            if tid not in self._threads:
                self._threads[tid] = json.dumps(
                    {"name": "thread_name", "ph": "M", "pid": self._pid, "tid": tid, "args": {"name": thread.name}}
                )
            naming = 0 if tid in self._named else len(self._threads[tid]) + 2
            # the event, its separator, the thread's name if the file lacks it, and the closing bracket
            if self._index < 0 or self._size + naming + len(line) + 2 + 3 > self._max_bytes:
                self._roll()
            if tid not in self._named:
                self._named.add(tid)
                self._put(self._threads[tid])
            self._put(line)
            self.written += 1

    def _put(self, line):
        data = (("[\n" if self._first else ",\n") + line).encode()
        self._first = False
        self._size += len(data)
        self._files.write([data])

    def _roll(self):
        if self._index >= 0:
            self._files.write([b"\n]\n"])
        self._index += 1
        self._files.start(_file_name(self.path, self._index))
        self._size = 0
        self._first = True
        self._named = set()
        for tid, event in self._threads.items():
            self._named.add(tid)
            self._put(event)

    def close(self):
        """End the last file (``]``), wait until it is written and stop the writer; a ``SourceError`` names the
        file that could not be written."""
        with self._lock:
            try:
                if self._index < 0:  # no span: an empty trace, still a file
                    self._roll()
                    self._files.write([b"[" if self._first else b"", b"\n]\n"])
                else:
                    self._files.write([b"\n]\n"])
            except SourceError:
                pass  # the writer's error, raised by close() below
            finally:
                self._files.close()


def timeline_files(path):
    """The files of the timeline written to ``path`` (a local path), in order."""
    out = []
    while os.path.exists(name := _file_name(path, len(out))):
        out.append(name)
    return out


def events(path):
    """The events of the timeline written to ``path`` and its rolled-over files, in order; a file cut short (a
    run that did not close it) gives the events it holds whole."""
    out = []
    for name in timeline_files(path):
        with open_url(name, "r") as f:
            for line in f:
                line = line.strip().removesuffix(",")  # an event per line, the comma after it
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:  # the last line of a file cut short
                        break
    return out
