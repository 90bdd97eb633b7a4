"""The sparse regions the text and pb parsers write into (``ingest.formats.base.Room``), made harder on them:
columns that start as garbage, and regions without room to spare."""

import contextlib

import numpy as np

from ingest.formats.base import Room


def fill_columns_with_garbage(monkeypatch):
    """Every chunk's sparse columns start as garbage, not as the zeros of fresh memory: a value the kernel leaves
    unwritten then shows up in the batches instead of passing as 0."""
    columns = Room.columns

    def columns_of_garbage(self, filled):
        cols = columns(self, filled)
        for array in (cols.keys, cols.hkeys, cols.values):
            array.view(np.uint8).fill(0xA5)
        return cols

    monkeypatch.setattr(Room, "columns", columns_of_garbage)


@contextlib.contextmanager
def room_to_spare(spare):
    """Regions with ``spare`` ids to spare (0: blocks are cut short wherever a feature's ids outgrow what the unit
    had so far)."""
    default, Room.SPARE = Room.SPARE, spare
    try:
        yield
    finally:
        Room.SPARE = default
