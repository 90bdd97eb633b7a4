"""The decorators for kernel helpers that take arrays and allocate none.

numba increfs and decrefs (atomically) every array argument of every function it calls,
inlined or not; in a loop over values that cost more than the work itself (the text and
pb kernels ran at half speed).  A helper compiled without numba's runtime (``_nrt=False``)
skips it.  Such a function must not allocate arrays; kernels that do (``np.empty``) keep
``njit(nogil=True, cache=True)``.  ``brief`` is ``helper`` without ``nogil``, for the short ones, and
``inline`` a helper LLVM always inlines, for the small ones called in the hot loops.

Each is compiled once per combination of argument *types*: numba would compile a helper again for every
distinct constant a call site passes (``_fail(st, MALFORMED, p, 0, -1, -1, 0)`` and its forty siblings),
which made a cold start seconds longer and bought nothing.
"""

from numba import njit, types

__all__ = ["helper", "brief", "inline"]


def _once_per_type(options):
    def decorate(fn):
        dispatcher = njit(**options)(fn)
        resolve = getattr(dispatcher, "get_call_template", None)
        if resolve is None:  # NUMBA_DISABLE_JIT=1: the Python function itself
            return dispatcher

        def get_call_template(args, kws):
            return resolve(tuple(types.unliteral(a) for a in args), {k: types.unliteral(v) for k, v in kws.items()})

        dispatcher.get_call_template = get_call_template
        return dispatcher

    return decorate


helper = _once_per_type(dict(nogil=True, cache=True, _nrt=False))

# A helper the pipeline calls from Python that takes microseconds keeps the GIL: released, the calling
# thread queues for it again on return, behind the other pipeline threads (a probe thread waited 1-3 ms for
# it at the 90th percentile while pb was read on 2 threads with unique ids).
brief = _once_per_type(dict(cache=True, _nrt=False))

# Inlined by LLVM (alwaysinline), as fast as numba's own inlining (inline="always"), which copies and re-types
# the callee at every call site: with it the pb decoder took a minute to compile, now about 20 s.
inline = _once_per_type(dict(nogil=True, cache=True, _nrt=False, forceinline=True))
