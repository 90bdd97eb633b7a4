"""A partition's messages read as one byte stream, fetched ahead of the parser."""

import collections

import numpy as np

from ..._native.kafka import gather
from ..ahead import Ahead
from ..base import UnitStream
from .fetch import fetcher

__all__ = ["KafkaStream", "POLL_MS"]

POLL_MS = 500


class KafkaStream(UnitStream):
    """The messages of one partition from offset ``start`` up to ``end`` (exclusive; None: forever), as bytes.

    A stream without end is *live*: a read returns what has arrived when no message comes within a
    poll, and ``at_boundary()`` tells the parser that the bytes so far end with a whole message (whole
    groups or records), so it need not hold the last group back.  It ends when ``stop`` is set.
    """

    def __init__(self, unit):
        super().__init__(unit.url)
        self._next, self._end = unit.first, unit.last
        self._chunks = collections.deque()  # Messages fetched and not read to their end
        self._message = 0  # the next byte to read: message and byte in the first chunk
        self._byte = 0
        if unit.resume is not None:  # the first message was delivered up to a byte
            (self._next, self._byte), _ = unit.resume
        self._read = 0  # stream position of the next byte
        self._tail = -self._byte  # stream position where the next fetched message starts
        self._starts = np.zeros(0, np.int64)  # stream position where each message read starts
        self._offsets = np.zeros(0, np.int64)  # and its offset
        self.live = self._end is None
        self._lease = unit.lease  # a consumer group's partition: it may end at any message boundary
        self._after = self._next  # the offset after the last message read whole
        self._cut = False
        self._fetch = self._ahead = None
        if self.live or self._next < self._end:
            self._fetch = fetcher(
                self.url, list(unit.brokers), unit.topic, unit.partition, unit.client, dict(unit.config)
            )
            self._ahead = Ahead(self._fetch_next, depth=2, name="ingest-kafka-fetch")

    def _fetch_next(self, stop):
        """The Messages of the next fetch (a list, empty when a live stream got nothing within a poll);
        None at the end offset."""
        if not self.live and self._next >= self._end:
            return None
        got, self._next = self._fetch.fetch(self._next, self._end, POLL_MS, stop)
        return got

    def _fill(self, waiting=True):
        """Take fetched messages into ``_chunks``; False at the end offset, or (unless ``waiting``) when a
        live stream has nothing new within a poll."""
        while not self._chunks:
            if self._ahead is None or self.stop is not None and self.stop.is_set() or self._cut:
                return False
            got = self._ahead.take()
            if got is None:
                return False
            if not got and self._byte == 0 and self._lease is not None and self._lease.should_stop(caught_up=True):
                self._cut = True
                return False
            for messages in got:
                starts = self._tail + np.cumsum(messages.lens) - messages.lens
                self._tail += int(messages.lens.sum())
                self._starts = np.concatenate([self._starts, starts])
                self._offsets = np.concatenate([self._offsets, messages.offsets])
                self._chunks.append(messages)
            if not self._chunks and not waiting:
                return False
        return True

    def at_boundary(self):
        return self.live and not self._chunks

    def describe(self, pos):
        """The URL and where stream position ``pos`` is in Kafka's terms."""
        i = max(0, int(np.searchsorted(self._starts, pos, side="right")) - 1)
        if not len(self._starts):
            return f"{self.url} (byte {pos} of the partition stream)"
        return f"{self.url} (message offset {self._offsets[i]}, byte {pos - self._starts[i]} of the message)"

    def positions(self, start, end):
        """``(stream positions, offsets)`` of the messages from the one holding ``start`` to the one holding
        ``end``; earlier ones are forgotten (blocks come in stream order)."""
        first = max(0, int(np.searchsorted(self._starts, start, side="right")) - 1)
        last = int(np.searchsorted(self._starts, end, side="right"))
        out = (self._starts[first:last].copy(), self._offsets[first:last].copy())
        self._starts, self._offsets = self._starts[first:], self._offsets[first:]
        return out

    def readinto(self, b):
        out = np.frombuffer(memoryview(b).cast("B"), np.uint8)
        n = 0
        while n < len(out):
            if self._byte == 0 and self._lease is not None and (self._cut or self._lease.should_stop(caught_up=False)):
                self._cut = True  # at a message boundary: the stream ends here
                break
            if not self._chunks and not self._fill(waiting=n == 0):
                break
            m = self._chunks[0]
            self._message, self._byte, filled = gather(m.buf, m.starts, m.lens, self._message, self._byte, out, n)
            self._read += filled - n
            n = filled
            if self._message:
                self._after = int(m.offsets[self._message - 1]) + 1
            if self._message == len(m.starts):
                self._chunks.popleft()
                self._message = self._byte = 0
        return n

    def close(self):
        if self._ahead is not None:
            self._ahead.close()
            self._fetch.close()
            self._ahead = self._fetch = None
        if self._lease is not None and not self.closed:
            self._lease.stopped(self._after)
        super().close()
