"""What every format front end shares: opening a work unit and closing it whatever happens."""
from ..sources import open_unit

__all__ = ["UnitFormat"]


class UnitFormat:
    """A front end turns work units into Blocks; subclasses implement ``_read(f, unit, stop)``."""

    splittable = False

    def read_unit(self, unit, stop=None):
        """Yield the Blocks of one work unit; skipped errors go to ``on_skip``, others raise."""
        f = open_unit(unit)
        try:
            yield from self._read(f, unit, stop)
        finally:
            f.close()

    def _read(self, f, unit, stop):
        raise NotImplementedError
