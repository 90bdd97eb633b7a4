"""The splitmix64 finalizer, shared by the DSL's key crossing and the unique-id hash table."""

import numpy as np

from .jit import inline

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@inline
def mix64(x):
    """A bijection of 64-bit words in which every input bit flips every output bit with probability 1/2."""
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x
