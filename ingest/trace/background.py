"""Files written by one background thread: what trace files and the timeline are written through.

The caller serializes and decides what goes in which file; the thread only opens, writes and closes, from a
bounded queue, so a slow store slows the caller down instead of growing memory.  An error of the thread is
kept and raised by the caller's next ``check``, ``flush`` or ``close``; after one the thread keeps taking
(and dropping) what is put, so that no caller waits on a full queue for ever.
"""

import threading
import weakref

from ..errors import ConfigError, SourceError
from ..queues import BoundedQueue
from ..sources.filesystems import url_to_fs

__all__ = ["BackgroundFiles", "MB", "file_mb"]

MB = 1 << 20  # the files' size caps are in MiB

_POLL = 0.1  # seconds between checks that the thread is still there, while waiting on it


def file_mb(value, caller):
    """``value`` checked as the ``max_file_mb`` (a size cap of a file in MB, fractions allowed) of ``caller``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{caller}(max_file_mb={value!r}): expected a number of MB > 0")
    return value


class _Failure:
    """What the thread met: the error and the file it was writing."""

    def __init__(self, exc, url):
        self.exc = exc
        self.url = url
        self.reported = False


def _run(items, failure_box, what):
    """The thread: execute the commands of ``items`` until ``("close",)``."""
    current = None  # (file object, url)
    while True:
        command = items.get()
        op = command[0]
        try:
            if failure_box:  # after an error: drop writes, answer flushes, stop at close
                if op == "flush":
                    command[1].set()
                elif op == "close":
                    return
                continue
            if op == "write":
                f = current[0]
                for piece in command[1]:
                    f.write(piece)
            elif op == "start":
                if current is not None:
                    current[0].close()
                current = None
                fs, path = command[1]
                current = (fs.open(path, "wb"), f"{command[2]}")
            elif op == "whole":
                fs, path = command[1]
                with fs.open(path, "wb") as f:
                    f.write(command[3])
            elif op == "flush":
                if current is not None:
                    current[0].flush()
                command[1].set()
            elif op == "close":
                if current is not None:
                    file, current = current[0], None
                    file.close()
                return
        except Exception as exc:  # kept for the caller, who raises it located
            url = command[2] if op in ("start", "whole") else (current[1] if current is not None else "?")
            failure_box.append(_Failure(exc, url))
            if current is not None:
                try:
                    current[0].close()
                except Exception:
                    pass
                current = None
            if op == "flush":
                command[1].set()
            elif op == "close":
                return


class BackgroundFiles:
    """One file at a time, written by a thread of its own (named ``ingest-<what>``).

    ``start(url)`` closes the file being written and opens ``url``; ``write(pieces)`` appends bytes-like
    pieces to it; ``whole(url, data)`` writes a small file of its own (a ``.meta``); ``flush()`` waits until
    everything put is written; ``close()`` closes the file and stops the thread.  Any fsspec URL (``hdfs://``
    through ingest's client).  ``what`` names the writer in errors (``"trace"``, ``"timeline"``).
    """

    def __init__(self, what, depth=64):
        self.what = what
        self._items = BoundedQueue(depth)
        self._failure = []  # at most one _Failure, appended by the thread
        self._closed = False
        self._thread = threading.Thread(
            target=_run, args=(self._items, self._failure, what), name=f"ingest-{what}", daemon=True
        )
        self._thread.start()
        # a writer dropped without close() still stops its thread
        self._finalizer = weakref.finalize(self, _stop, self._items, self._thread)

    def _put(self, command):
        if self._closed:
            raise SourceError(f"{self.what}: the writer is closed", source=None)
        self.check()
        while self._thread.is_alive():
            try:
                self._items.put(command, timeout=_POLL)
                return
            except Exception:  # queue.Full: the thread is busy writing
                continue
        raise SourceError(f"{self.what}: its writer thread is gone", source=None)

    def check(self) -> None:
        """Raise the thread's error, if it met one (a ``SourceError`` naming the file, the cause chained)."""
        if self._failure:
            failure = self._failure[0]
            failure.reported = True
            raise SourceError(
                f"{self.what} {failure.url}: cannot write: {failure.exc}", source=failure.url
            ) from failure.exc

    @property
    def failed(self) -> bool:
        return bool(self._failure)

    def start(self, url) -> None:
        self._put(("start", url_to_fs(url), str(url)))

    def write(self, pieces) -> None:
        self._put(("write", pieces))

    def whole(self, url, data) -> None:
        self._put(("whole", url_to_fs(url), str(url), data))

    def flush(self) -> None:
        done = threading.Event()
        self._put(("flush", done))
        while not done.wait(_POLL):
            if not self._thread.is_alive():
                break
        self.check()

    def close(self) -> None:
        """Write what is queued, close the file, stop the thread; raise its error unless raised before."""
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        _stop(self._items, self._thread)
        if self._failure and not self._failure[0].reported:
            self.check()


def _stop(items, thread):
    if thread.is_alive():
        items.put(("close",))
        thread.join()
