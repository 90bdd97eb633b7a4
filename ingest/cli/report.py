"""How the commands talk to the user: errors and warnings as one line, progress bars on a terminal only."""

import contextlib
import sys
import warnings

from tqdm import tqdm

from ..errors import DslError, UnseenFeatureWarning

__all__ = ["fail", "one_line_warnings", "progress_bar"]


def fail(prog, exc):
    """Print ``exc`` as ``<prog>: <message>`` on stderr and return the exit code 2.  The message is one line,
    but for a DSL error, whose expression and caret follow on lines of their own, as in Python."""
    if isinstance(exc, DslError):
        print(f"{prog}: {exc}", file=sys.stderr)
    else:
        print(f"{prog}: {' '.join(str(exc).split())}", file=sys.stderr)
    return 2


@contextlib.contextmanager
def one_line_warnings(prog):
    """Show the warnings raised meanwhile as ``<prog>: warning: <message>``, one line each."""

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{prog}: warning: {' '.join(str(message).split())}", file=file or sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        warnings.simplefilter("always", UnseenFeatureWarning)  # one per epoch that missed a feature
        yield


def progress_bar(total=None, unit="B", desc=None, enabled=None):
    """A tqdm bar on stderr when it is a terminal (``enabled`` None) or when asked, else one that shows nothing;
    ``update(n)`` adds ``n`` done, ``close()`` ends it.  ``unit="B"`` counts bytes with MB, GB..."""
    show = sys.stderr.isatty() if enabled is None else enabled
    return tqdm(
        total=total,
        unit=unit,
        unit_scale=True,
        unit_divisor=1000,
        desc=desc,
        disable=not show,
        file=sys.stderr,
        dynamic_ncols=True,
        mininterval=0.5,
    )
