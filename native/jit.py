"""The decorators of the kernels: ``kernel`` for the top-level ones, and those of the helpers that take arrays and
allocate none.  Every one caches its compiled code on disk and treats a cache index it cannot read as empty.

numba increfs and decrefs (atomically) every array argument of every function it calls,
inlined or not; in a loop over values that cost more than the work itself (the text and
pb kernels ran at half speed).  A helper compiled without numba's runtime (``_nrt=False``)
skips it.  Such a function must not allocate arrays; kernels that do (``np.empty``) are ``kernel``s.
``brief`` is ``helper`` without ``nogil``, for the short ones, and ``inline`` a helper LLVM always inlines,
for the small ones called in the hot loops.

Each is compiled once per combination of argument *types*: numba would compile a helper again for every
distinct constant a call site passes (``_fail(st, MALFORMED, p, 0, -1, -1, 0)`` and its forty siblings),
which made a cold start seconds longer and bought nothing.

On a free-threaded build every one is called from Python through ``TypedCalls`` (docs/decisions.md, "numba's
dispatch without a GIL").
"""

import inspect
import pickle
import sysconfig
import threading

from numba import njit, types
from numba._dispatcher import compute_fingerprint
from numba.core.dispatcher import Dispatcher

__all__ = ["kernel", "kernel_keeping_gil", "helper", "brief", "inline", "viewing", "TypedCalls"]

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

# held while numba's own dispatch runs for a TypedCalls: finding a new compiled version, or a call it cannot key
_NUMBA_DISPATCH = threading.Lock()


class TypedCalls:
    """A numba dispatcher called from Python without numba's C dispatch: the compiled version for the arguments'
    types is found by their type fingerprint (numba's own, computed in C) in a dict of this object's.

    numba 0.68's dispatch keeps process-wide tables (argument type fingerprints, compiled versions) that it grows
    without a lock; without a GIL a call whose types are new to the process, growing them in one thread, let a
    call in another read freed memory (SIGSEGV). Here numba's dispatch runs only under one lock: for a call with
    types new to this kernel (it compiles, or loads from the disk cache, the version for exactly those types) and
    for the rare call it cannot key (keyword or omitted arguments, a value numba has no fingerprint for). Compiled
    code that calls the kernel calls the dispatcher itself (``_numba_type_``); every other attribute is the
    dispatcher's."""

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        self._numba_type_ = types.Dispatcher(dispatcher)
        self._versions = {}  # type fingerprint of the arguments -> compiled entry point
        self._arity = len(inspect.signature(dispatcher.py_func).parameters)

    def __getattr__(self, name):
        return getattr(self.dispatcher, name)

    def __reduce__(self):  # pickled as its dispatcher (its compiled versions are this process's)
        return TypedCalls, (self.dispatcher,)

    def __call__(self, *args, **kwargs):
        if not kwargs:
            try:
                key = compute_fingerprint(args)
            except (NotImplementedError, ValueError):  # a value numba types in Python only (or an empty list)
                key = None
            if key is not None:
                version = self._versions.get(key) or self._compiled(key, args)
                if version is not None:
                    return version(*args)
        with _NUMBA_DISPATCH:
            return self.dispatcher(*args, **kwargs)

    def _compiled(self, key, args):
        """The compiled version for ``args``' types, found or made by numba (None when ``args`` omit some)."""
        if len(args) != self._arity:
            return None
        with _NUMBA_DISPATCH:
            version = self._versions.get(key)
            if version is None:
                version = self.dispatcher.compile(tuple(self.dispatcher.typeof_pyval(a) for a in args))
                self._versions[key] = version
        return version


def _called_from_python(dispatcher):
    """``dispatcher`` as Python calls it: through ``TypedCalls`` on a free-threaded build."""
    if FREE_THREADED and isinstance(dispatcher, Dispatcher):  # not under NUMBA_DISABLE_JIT
        return TypedCalls(dispatcher)
    return dispatcher


def _tolerant_cache(dispatcher):
    """``dispatcher`` whose on-disk cache index counts as empty when it names a type this version no longer has.

    numba unpickles a cache index before it checks that the source changed, so an index written by an earlier
    version that named a bundle since renamed or removed raised AttributeError at the kernel's first call
    (numba issue 6018); after an in-place upgrade (numba's cache files outlive ``pip install -U``) that would be
    every run.  Such an index is stale by definition: the kernel compiles again and overwrites it."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    load = getattr(cache_file, "_load_index", None)
    if load is None:  # NUMBA_DISABLE_JIT=1, or another numba
        return dispatcher

    def load_index():
        try:
            return load()
        except (AttributeError, ImportError, pickle.UnpicklingError, EOFError):
            return {}

    cache_file._load_index = load_index
    return dispatcher


def _cached(options):
    def decorate(fn):
        return _called_from_python(_tolerant_cache(njit(**options)(fn)))

    return decorate


# A top-level kernel (called from Python; may allocate arrays): compiled once per install and cached on disk.
kernel = _cached(dict(nogil=True, cache=True))
# One that keeps the GIL: it takes microseconds and allocates (see ``brief``).
kernel_keeping_gil = _cached(dict(cache=True))


def _once_per_type(options):
    def decorate(fn):
        dispatcher = _tolerant_cache(njit(**options)(fn))
        resolve = getattr(dispatcher, "get_call_template", None)
        if resolve is None:  # NUMBA_DISABLE_JIT=1: the Python function itself
            return dispatcher

        def get_call_template(args, kws):
            return resolve(tuple(types.unliteral(a) for a in args), {k: types.unliteral(v) for k, v in kws.items()})

        dispatcher.get_call_template = get_call_template
        return _called_from_python(dispatcher)

    return decorate


helper = _once_per_type(dict(nogil=True, cache=True, _nrt=False))

# A helper the pipeline calls from Python that takes microseconds keeps the GIL: released, the calling
# thread queues for it again on return, behind the other pipeline threads (a probe thread waited 1-3 ms for
# it at the 90th percentile while pb was read on 2 threads with unique ids).
brief = _once_per_type(dict(cache=True, _nrt=False))

# Inlined by LLVM (alwaysinline), as fast as numba's own inlining (inline="always"), which copies and re-types
# the callee at every call site: with it the pb decoder took a minute to compile, now about 20 s.
inline = _once_per_type(dict(nogil=True, cache=True, _nrt=False, forceinline=True))

# A helper that returns a view of an array it is given (a part of a batch's buffer): a view needs numba's runtime,
# which ``helper`` is compiled without.
viewing = _once_per_type(dict(nogil=True, cache=True))
