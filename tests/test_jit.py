"""Calling kernels from Python without numba's C dispatch (``TypedCalls``, used on free-threaded builds; made here
directly, so that every build checks it)."""

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit
from numba.core.errors import TypingError

from ingest._native.jit import FREE_THREADED, TypedCalls, kernel


def _total(parts, scale):
    return parts[0].sum() * scale + len(parts)


def test_each_type_combination_runs_the_version_compiled_for_it():
    dispatcher = njit(nogil=True)(_total)
    calls = TypedCalls(dispatcher)
    parts = (np.arange(4.0), np.arange(3.0))
    assert calls(parts, 2) == dispatcher(parts, 2) == 14.0
    assert calls(parts, 0.5) == 5.0  # a float scale: another version
    readonly = np.arange(4.0)
    readonly.flags.writeable = False
    assert calls((readonly, np.arange(3.0)), 2) == 14.0
    assert calls(parts, 3) == 20.0  # the first version again
    assert len(calls._versions) == 3
    assert {tuple(sig) for sig in dispatcher.signatures} >= {
        tuple(calls.typeof_pyval(a) for a in args)
        for args in [(parts, 2), (parts, 0.5), ((readonly, np.arange(3.0)), 2)]
    }


def test_keyword_and_unkeyed_calls_go_through_numba():
    @njit(nogil=True)
    def scaled(x, scale=2):
        return x * scale

    calls = TypedCalls(scaled)
    assert calls(3, scale=4) == 12  # keywords
    assert calls(3) == 6  # an omitted argument
    assert calls(3, 5) == 15  # keyed
    assert len(calls._versions) == 1  # the keyed call's


def test_compiled_code_calls_the_kernel_and_attributes_are_the_dispatchers():
    calls = TypedCalls(njit(nogil=True)(_total))

    @njit
    def twice(parts):
        return calls(parts, 1) * 2

    parts = (np.ones(2), np.ones(5))
    assert twice(parts) == 8.0
    assert calls.py_func is _total
    assert calls.dispatcher.py_func is _total


def test_a_pickled_one_calls_the_same_kernel():
    calls = TypedCalls(njit(nogil=True)(_total))
    parts = (np.arange(4.0), np.arange(3.0))
    assert calls(parts, 2) == 14.0
    again = pickle.loads(pickle.dumps(calls))
    assert isinstance(again, TypedCalls) and again.py_func is _total
    assert again(parts, 2) == 14.0


def test_a_type_error_is_numbas():
    calls = TypedCalls(njit(nogil=True)(_total))
    with pytest.raises(TypingError):
        calls(("not", "arrays"), 1)
    assert not calls._versions


def test_the_decorators_wrap_only_on_a_free_threaded_build():
    @kernel
    def plus_one(x):
        return x + 1

    assert plus_one(1) == 2
    assert isinstance(plus_one, TypedCalls) == FREE_THREADED


def test_calls_survive_numba_growing_its_type_tables_in_another_thread():
    """numba's own dispatch, without a GIL, crashed 8 of 12 such runs (the thread's lookup read a table freed as
    another thread's new types grew it); under the GIL it cannot crash, and the test passes there."""
    script = textwrap.dedent(
        """
        import itertools, threading
        import numpy as np
        import numba
        from ingest._native.jit import TypedCalls

        @numba.njit("int64(int64)", nogil=True)
        def typed_once(x):
            return x

        size = TypedCalls(numba.njit(nogil=True)(lambda parts: len(parts)))
        parts = tuple(np.zeros(3) for _ in range(4))
        done = threading.Event()

        def calls():
            while not done.is_set():
                assert size(parts) == 4

        thread = threading.Thread(target=calls)
        thread.start()
        for n, values in enumerate(itertools.product((1, 1.0, True, None, 1j), repeat=8)):  # a new type each
            if n == 40000:
                break
            try:
                typed_once(values)
            except TypeError:
                pass
        done.set()
        thread.join()
        print("done")
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "done", run.stderr[-2000:]
