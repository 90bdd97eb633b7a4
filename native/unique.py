"""Per-batch unique ids of one sparse feature (docs/formats.md, the batch): an open-addressing hash table.

``unique_ids`` fills, for the ``N`` ids of a feature in a batch, the distinct ids in order of
first occurrence, ``inverse`` (``unique[inverse] == ids``), and for each distinct id the rows
it occurs in (``unique_rows[unique_row_offsets[u]:unique_row_offsets[u + 1]]``, in occurrence
order: XDL's sidx/sseg).  A 128-bit id is the pair (hkey, key).
"""

import numpy as np

from .bundles import bundle
from .jit import brief, helper, inline, kernel, viewing
from .mix import mix64
from .parts import BIG, KEYS, LAYOUT, OFFSETS, PAIRS, SMALL, part, unique_part, vector

_SPREAD = np.uint64(0x94D049BB133111EB)

# The ids of a batch's sparse features as the batch builder lays them in its buffer (``buf`` and ``meta``, parts.py),
# for ``unique_ids_of_batch``: feature ``f`` has ``counts[f]`` ids from ``key_base[f]`` in the keys (or the pairs when
# ``pair[f]``) and its row offsets in row ``row_of[f]`` of table ``table_of[f]``'s.
BatchIds = bundle(
    "BatchIds",
    buf="u1[:]",
    meta="i8[:]",
    pair="b1[:]",
    key_base="i8[:]",
    counts="i8[:]",
    table_of="i8[:]",
    row_of="i8[:]",
)


@inline
def _hash(h, k):
    return mix64(np.uint64(k) ^ (np.uint64(h) * _SPREAD))


@brief
def table_size(n):
    """Slots of the table for ``n`` ids: a power of two, at least 16, more than 2n (at most half full)."""
    size = 16
    while size <= 2 * n:
        size *= 2
    return size


@helper
def unique_ids(hkeys, keys, slots, places, uniq_h, uniq_k, inverse):
    """Fill the distinct ids of ``(hkeys[i], keys[i])`` (``hkeys`` empty: all 0) and ``inverse``; returns ``U``.

    ``slots`` (int32, a power of two > N, all -1) is the table.  ``places`` (each id's first slot), ``uniq_k``
    and ``inverse`` need room for N entries, and ``uniq_h`` too unless ``hkeys`` is empty (it is then neither
    written nor read).
    """
    n = len(keys)
    has_h = len(hkeys) > 0
    mask = np.uint64(len(slots) - 1)
    # Hashing first, in a loop of its own, takes the hash off the path from one probe to the next.
    for i in range(n):
        places[i] = _hash(hkeys[i] if has_h else 0, keys[i]) & mask
    nu = 0
    for i in range(n):
        k = keys[i]
        h = hkeys[i] if has_h else 0
        # The id is written where it goes if new, and an empty slot points there: "empty" and "holds
        # this id" become one test that fails only on a clash.  A branch on "new or seen" would miss
        # for about half the ids of a high-cardinality feature; this loop has none (0.63-0.67x the time).
        uniq_k[nu] = k
        if has_h:  # serialized ids have no high words to store and compare: 0.88-0.90x the time without them
            uniq_h[nu] = h
        s = places[i]
        u = slots[s]
        at = u if u >= 0 else nu
        while uniq_k[at] != k or (has_h and uniq_h[at] != h):  # another id holds the slot: probe on
            s = (s + np.uint64(1)) & mask
            u = slots[s]
            at = u if u >= 0 else nu
        slots[s] = at
        inverse[i] = at
        nu += at == nu
    return nu


@helper
def unique_rows(inverse, nu, offsets, ranks, counts, unique_row_offsets, rows):
    """Fill the rows each of ``nu`` distinct ids occurs in, ``rows[unique_row_offsets[u]:unique_row_offsets[u + 1]]``
    in occurrence order, from the ``inverse`` of ids whose row ``r`` is ``offsets[r]:offsets[r + 1]``.

    ``ranks`` needs room for N entries (N = ``len(inverse)``) and ``counts`` for N + 1.
    """
    n = len(inverse)
    occurrences = counts[:nu]
    occurrences[:] = 0
    for i in range(n):
        # Each occurrence keeps its rank among its id's, so no write of the last loop waits on the one before.
        u = inverse[i]
        ranks[i] = occurrences[u]
        occurrences[u] += 1
    total = 0  # in a register: the loop does not reload what it just stored
    unique_row_offsets[0] = 0
    for u in range(nu):
        total += occurrences[u]
        unique_row_offsets[u + 1] = total
    # Each id's row counts the rows that start at or before it, marked where they start: one flat loop over
    # the ids (a loop a row cost more than its ids in the one-id rows of most features: 0.95-0.97x the time).
    starts = counts[: n + 1]
    starts[:] = 0
    for r in range(1, len(offsets) - 1):
        starts[offsets[r]] += 1
    r = 0
    for i in range(n):
        r += starts[i]
        rows[unique_row_offsets[inverse[i]] + np.int64(ranks[i])] = r


@kernel  # views the batch's buffer: needs numba's runtime
def unique_ids_of_batch(ids, scratch):
    """``unique_ids`` for every sparse feature of a batch (``ids``, a ``BatchIds``), in one call, into the batch's
    unique-id outputs (``big``, ``small`` and ``layout``, its last parts) with ``scratch`` ``(slots, places)``;
    ``unique_rows_of_batch`` fills the rest of them when a consumer asks.

    With ``F`` features, ``layout``
    (int64 ``[3F + 2]``) gets ``at = layout[:F + 1]`` and ``words = layout[F + 1:2F + 2]`` of
    ``unique_layout`` and then each feature's count of unique ids.  Feature ``f``'s inverse goes to
    ``small[at[f]:]``, its unique rows to ``small[at[F] + at[f]:]``, its unique ids to ``big[words[f]:]``
    (pairs as (hkey, key) words) and its unique row offsets to ``big[words[F] + at[f] + f:]``
    (``unique_sizes`` sizes ``big``, ``small`` and ``layout``).  ``slots`` needs
    ``table_size(max(counts))`` entries, ``places`` room for max(counts).
    """
    buf, meta, pair, key_base, counts, _, _ = ids
    slots, places = scratch
    keys = vector(buf, meta, KEYS, np.int64)
    pairs = part(buf, meta, PAIRS, np.int64)
    big, small, layout = _outputs(buf, meta)
    nf = len(counts)
    at = layout[: nf + 1]
    words = layout[nf + 1 : 2 * nf + 2]
    nunique = layout[2 * nf + 2 :]
    unique_layout(counts, pair, at, words)
    for f in range(nf):
        n = counts[f]
        kb = key_base[f]
        w = words[f]
        table = slots[: table_size(n)]
        table[:] = -1
        inverse = small[at[f] : at[f] + n]
        if pair[f]:
            uniq = big[w : w + 2 * n].reshape((n, 2))
            hkeys, fkeys, uniq_h, uniq_k = pairs[kb : kb + n, 0], pairs[kb : kb + n, 1], uniq[:, 0], uniq[:, 1]
            nunique[f] = unique_ids(hkeys, fkeys, table, places, uniq_h, uniq_k, inverse)
        else:
            nunique[f] = unique_ids(keys[:0], keys[kb : kb + n], table, places, keys[:0], big[w : w + n], inverse)


@kernel  # views the batch's buffer: needs numba's runtime
def unique_rows_of_batch(ids, scratch):
    """``unique_rows`` for every sparse feature of a batch whose unique ids ``unique_ids_of_batch`` computed, into
    its unique rows and unique row offsets (placed as that kernel says), with ``scratch`` ``(ranks, counts)``:
    room for max(counts) entries and one more."""
    buf, meta, _, _, counts, table_of, row_of = ids
    ranks, work_counts = scratch
    big, small, layout = _outputs(buf, meta)
    nf = len(counts)
    at = layout[: nf + 1]
    words = layout[nf + 1 : 2 * nf + 2]
    nunique = layout[2 * nf + 2 :]
    for f in range(nf):
        n = counts[f]
        a = at[f]
        o = words[nf] + a + f
        offsets = part(buf, meta, OFFSETS + table_of[f], np.int64)[row_of[f]]
        rows = small[at[nf] + a : at[nf] + a + n]
        unique_rows(small[a : a + n], nunique[f], offsets, ranks, work_counts, big[o : o + n + 1], rows)


@viewing
def _outputs(buf, meta):
    """The unique-id outputs ``(big, small, layout)`` of a batch's buffer."""
    u = unique_part(meta)
    return (
        vector(buf, meta, u + BIG, np.int64),
        vector(buf, meta, u + SMALL, np.int32),
        vector(buf, meta, u + LAYOUT, np.int64),
    )


@helper
def unique_layout(counts, pair, at, words):
    """Where ``unique_ids_of_batch`` puts each feature's outputs: ``at[f]``, the ids of the features before
    ``f``, and ``words[f]``, their id words (2 an id when ``pair[f]``), both for ``f`` up to ``F``
    included."""
    at[0] = 0
    words[0] = 0
    for f in range(len(counts)):
        at[f + 1] = at[f] + counts[f]
        words[f + 1] = words[f] + counts[f] * (2 if pair[f] else 1)


@inline
def unique_sizes(nkeys, npairs, nf):
    """The items of ``big``, ``small`` and ``layout`` of ``unique_ids_of_batch`` for ``nf`` features with ``nkeys``
    ids in ``keys`` and ``npairs`` in ``pairs`` (the batch builder's ``batch_layout`` places them in the batch's
    buffer)."""
    total = nkeys + npairs
    return nkeys + 2 * npairs + total + nf, 2 * total, 3 * nf + 2
