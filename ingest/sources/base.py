"""What a source is to the rest of ingest: work units, the byte stream a unit opens as, and the ``Source`` that
plans them for its URLs and answers for their reader-wide concerns (docs/architecture.md, adding a source)."""

import dataclasses
import io

from ..errors import ConfigError

__all__ = ["Unit", "UnitStream", "Source", "Delivery", "read_into"]


class Unit:
    """A work unit: what one parse worker reads in one go.  Each source's units are frozen dataclasses with at
    least these attributes:

    - ``index``: the unit's number in plan order (before sharding), the same in every worker of a job;
    - ``url``: what it reads, as errors and timelines name it;
    - ``start``, ``end``, ``size``: the byte range ``[start, end)`` (``end`` None: to the end) of an input of
      ``size`` bytes (None when unknown);
    - ``resume``: set when a restored state continues the unit: ``(position, rows)``, where a group starts (in
      the source's own terms) and the samples of that group already delivered.
    """

    @property
    def aligned(self) -> bool:
        """Whether the unit's stream begins and ends at sample groups (a whole file, a partition), as opposed to
        a nominal byte range of a larger input, which the format aligns to its groups or records."""
        return True

    #: whether ``open()`` starts work ahead of the reader (decompression on a thread), and the stream ends: a parse
    #: worker then takes its next unit with it and opens that one as soon as this one's stream is done with such
    #: work (``UnitStream.when_read``), so that its first bytes are ready when it comes
    opens_ahead = False

    @property
    def stream_start(self) -> int:
        """Stream position of the first byte ``open()`` returns."""
        return 0

    def rewound(self) -> "Unit":
        """The unit without ``resume``: its ``open()`` starts where its stream positions count from, so that the
        lines or records before a position can be counted."""
        return dataclasses.replace(self, resume=None)  # type: ignore[type-var]

    def ident(self) -> list:
        """What identifies the unit in a reader state's plan digest: equal between two runs over the same input."""
        return [self.index, self.url]  # type: ignore[attr-defined]

    def resume_refused(self, position) -> str | None:
        """What a resume position of this unit must be, when ``position`` (from a reader state) cannot be one;
        None when it can."""
        return None

    def open(self) -> "UnitStream":
        """The unit's bytes as a ``UnitStream``, positioned at ``stream_start``."""
        raise NotImplementedError


class UnitStream(io.RawIOBase):
    """A unit opened: a binary stream (``readinto``) that also tells the formats what they need to know of its
    source.  The defaults describe a stream that ends, whose positions are plain byte offsets."""

    #: a stream without end: ``readinto`` returns what has arrived, and the parser need not wait for more
    live = False

    #: the byte just before the stream's first one, when the unit resumes and its source read it on the way (a
    #: format checks that a resume position is where a line can start); None otherwise
    byte_before = None

    def __init__(self, url):
        super().__init__()
        self.url = url
        self.stop = None  # threading.Event, set when the reader stops: a live stream then ends

    def readable(self):
        return True

    def at_boundary(self) -> bool:
        """Whether the bytes returned so far end with whole groups or records (a live stream's message)."""
        return False

    def describe(self, pos) -> str:
        """Where stream position ``pos`` is, for an error message: the URL and what else helps to find it."""
        return self.url

    def when_read(self, callback) -> None:
        """Call ``callback()`` once the stream's work ahead of its reader is done (a read-ahead thread reached the
        end), from whichever thread did it; at once when it does none, or is done."""
        callback()

    def positions(self, start, end):
        """What a Block of stream positions ``[start, end)`` carries to map its positions to the source's own
        (see ``Block.messages``), or None when positions are the source's own."""
        return None


class Source:
    """The inputs of some URL schemes (``registry.source_for``).  ``plan`` is the one method a source must have;
    the others answer for the reader as a whole and default to "nothing to do".

    ``options`` is what the reader's option method of the URLs' scheme set (``ReaderOptions.sources[scheme]``,
    from ``DataReader.kafka(...)``...), or None."""

    def options(self, **settings):
        """The source's options object from the settings of its reader method (``DataReader.kafka(...)``),
        checked."""
        raise ConfigError(f"{type(self).__name__} takes no options")

    def plan(self, urls, *, splittable, compression, task_num, unit_bytes, options, first_index) -> list:
        """The work units of ``urls`` (in order, indices from ``first_index``)."""
        raise NotImplementedError

    def check(self, units, options, reader_options, name) -> None:
        """Refuse, with a ``ConfigError`` naming reader ``name``, what ``units`` cannot be read with (the reader's
        ``ReaderOptions``)."""

    def live(self, options) -> bool:
        """Whether its units never end (read until the reader stops)."""
        return False

    def member(self, urls, reader_options, name):
        """A unit source for the pipeline when the reader's units come and go (it joins a group that assigns
        them): an object with ``start(delivery)`` (a ``Delivery``), ``next_unit(stop)``, ``commit()`` and
        ``close()``; None when the units are planned once.  ``urls`` are all the reader's paths; refuses with a
        ``ConfigError`` what it cannot be combined with."""
        return None

    def committer(self, units, options):
        """An object whose ``commit(progress)`` reports how far ``units`` were delivered (a ``Progress``
        snapshot) to the source, a consumer group's offsets, and ``close()``; or None."""
        return None

    def state_options(self, options) -> dict:
        """Options of this source that fix the sequence of samples: a state resumes only a reader with the same."""
        return {}


class Delivery:
    """What a running reader tells a source that assigns its units as they come (a consumer group member), and
    the one thing it lets it ask: everything between the two goes through here.  Units are named by index."""

    def delivered(self, index) -> bool:
        """Whether the consumer was handed every sample of the unit."""
        raise NotImplementedError

    def where(self, index):
        """``(delivered(index), where delivery of the unit stopped)``, read at once (the consumer may be handed the
        unit's last sample meanwhile): ``(position, rows)``, or None when nothing of it was handed."""
        raise NotImplementedError

    def forget(self, index) -> None:
        """The unit is done with: drop what is kept of it."""
        raise NotImplementedError

    def flush(self) -> None:
        """Deliver the partial batch now rather than when more input fills it (a drain before a revocation)."""
        raise NotImplementedError

    def stopped(self) -> bool:
        """Whether the reader is shutting down."""
        raise NotImplementedError


def read_into(f, view):
    """Read up to ``len(view)`` bytes into the writable memoryview; returns the count (0 at EOF)."""
    readinto = getattr(f, "readinto", None)
    if readinto is not None:
        try:
            n = readinto(view)
            return n or 0
        except (NotImplementedError, io.UnsupportedOperation):
            pass
    data = f.read(len(view))
    view[: len(data)] = data
    return len(data)
