"""Seeded synthetic ads samples in the text format, for tests and benchmarks.

A sample group is one page view: 1 to 40 ads shown to one user.  The user's features
(``uid``, ``age``, ``gender``, a 40-key click history ``clk_hist`` with counts, 8 category
preferences ``cate_pref`` with weights, dense ``user_emb`` of 8 floats) repeat on every
line of the group; each ad has its own ``item``, ``cate``, ``shop``, ``brand``, 12 title
terms ``title``, 4 weighted ``tags`` and a dense ``ad_ctx`` of 4 floats.  Ids are Zipf
distributed ranks mixed into 64-bit space (each feature within its own bit width), labels
are click and conversion: random (5 % clicks), or with ``learnable=True`` drawn from a click
probability that depends on the ad's category and the user's age and gender, so that a model
trained on them sees its loss fall.  Lines are about 1.3 KB.

    python -m ingest.synthetic OUT.txt N [--seed S] [--learnable]
"""

import argparse
import sys

import numpy as np

from ._native.synthetic import Ads, Users, format_ads_lines

__all__ = ["SPARSE", "DENSE", "LABEL_COUNT", "declare", "generate", "write", "click_probability"]

# sparse feature -> bit width of its ids
SPARSE = {
    "uid": 52,
    "age": 4,
    "gender": 2,
    "clk_hist": 52,
    "cate_pref": 14,
    "item": 52,
    "cate": 14,
    "shop": 30,
    "brand": 24,
    "title": 32,
    "tags": 17,
}
DENSE = {"user_emb": 8, "ad_ctx": 4}
LABEL_COUNT = 2
_ORDER = list(SPARSE) + list(DENSE)
_NAMES = np.frombuffer("".join(_ORDER).encode(), np.uint8).copy()
_NAME_OFF = np.concatenate([[0], np.cumsum([len(n) for n in _ORDER])]).astype(np.int64)
_CHUNK = 20000


def declare(reader, aux=(), **options):
    """Declare every synthetic feature on ``reader`` (and its label count); returns the reader.

    Features named in ``aux`` go to table 1 (the user features of a ``pb`` file converted with
    ``--aux``); ``options`` apply to the sparse features.
    """
    reader.label_count(LABEL_COUNT)
    for name in SPARSE:
        reader.feature(name=name, type="sparse", table=int(name in aux), **options)
    for name, nvec in DENSE.items():
        reader.feature(name=name, type="dense", nvec=nvec, table=int(name in aux))
    return reader


def _splitmix64(x):
    x = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _ids(rng, shape, feature, bits, a=1.15):
    """Zipf ranks mapped to distinct ids of ``bits`` bits, salted per feature."""
    ranks = rng.zipf(a, size=shape).astype(np.uint64)
    salt = np.uint64(_ORDER.index(feature) + 1) << np.uint64(56)
    with np.errstate(over="ignore"):
        mixed = _splitmix64(ranks ^ salt)
    return (mixed >> np.uint64(64 - bits)).astype(np.int64)


def click_probability(cate, age, gender):
    """The click probability of ``learnable`` samples: a logistic function of the ad's category (its id mod 5),
    the user's age and gender."""
    score = (cate % 5 - 2) * 0.9 + (age - 4.5) * 0.25 + np.where(gender == 1, 0.6, -0.3) - 1.5
    return 1 / (1 + np.exp(-score))


def _chunk_arrays(rng, n, first_ts, learnable=False):
    sizes = np.minimum(rng.geometric(1 / 10, size=n), 40)
    ends = np.cumsum(sizes)
    ngroups = int(np.searchsorted(ends, n) + 1)
    sizes = sizes[:ngroups]
    sizes[-1] -= ends[ngroups - 1] - n
    group_local = np.repeat(np.arange(ngroups), sizes)
    pos_in_group = np.arange(n) - np.repeat(ends[:ngroups] - sizes, sizes)
    g = ngroups
    arrays = dict(
        group=group_local,
        pos_in_group=pos_in_group.astype(np.int64),
        ts=(first_ts + group_local * 3).astype(np.int64),
        uid=_ids(rng, g, "uid", SPARSE["uid"]),
        age=rng.integers(0, 10, g),
        gender=rng.integers(0, 3, g),
        clk_keys=_ids(rng, (g, 40), "clk_hist", SPARSE["clk_hist"]),
        clk_cnt=rng.integers(1, 6, (g, 40)),
        pref_keys=_ids(rng, (g, 8), "cate_pref", SPARSE["cate_pref"]),
        pref_w=rng.integers(0, 10000, (g, 8)),
        user_emb=rng.integers(-20000, 20000, (g, 8)),
        item=_ids(rng, n, "item", SPARSE["item"]),
        cate=_ids(rng, n, "cate", SPARSE["cate"]),
        shop=_ids(rng, n, "shop", SPARSE["shop"]),
        brand=_ids(rng, n, "brand", SPARSE["brand"]),
        title=_ids(rng, (n, 12), "title", SPARSE["title"]),
        tags=_ids(rng, (n, 4), "tags", SPARSE["tags"]),
        tag_w=rng.integers(0, 10000, (n, 4)),
        ad_ctx=rng.integers(-20000, 20000, (n, 4)),
    )
    draw = rng.random(n)
    if learnable:
        p = click_probability(arrays["cate"], arrays["age"][group_local], arrays["gender"][group_local])
    else:
        p = 0.05
    clk = (draw < p).astype(np.int64)
    arrays["clk"] = clk
    arrays["conv"] = clk * (rng.random(n) < 0.1)
    return {k: np.ascontiguousarray(v, dtype=np.int64) for k, v in arrays.items()}, ngroups


def generate_arrays(n, seed=0, learnable=False):
    """Yield ``(first_group, arrays)`` per chunk: the values ``generate`` formats.

    ``arrays["group"]`` numbers groups within the chunk (group-level arrays are indexed
    by it); the group id of a line is ``first_group + group``.
    """
    seeds = np.random.SeedSequence(seed)
    done = 0
    first_group = 0
    while done < n:
        k = min(_CHUNK, n - done)
        rng = np.random.default_rng(seeds.spawn(1)[0])
        arrays, ngroups = _chunk_arrays(rng, k, 1_700_000_000 + 3 * first_group, learnable)
        yield first_group, arrays
        first_group += ngroups
        done += k


def generate(n, seed=0, learnable=False):
    """Yield the text of ``n`` samples as bytes chunks of whole lines and whole groups."""
    for first_group, arrays in generate_arrays(n, seed, learnable):
        out = np.empty(len(arrays["group"]) * 2048, np.uint8)
        users = Users._make(arrays[k] for k in Users._fields).checked()
        ads = Ads._make(arrays[k] for k in Ads._fields).checked()
        used = format_ads_lines(out, _NAMES, _NAME_OFF, first_group, users, ads)
        yield out[:used].tobytes()


def write(path, n, seed=0, learnable=False):
    """Write ``n`` samples to ``path``; returns the number of bytes written."""
    total = 0
    with open(path, "wb") as f:
        for chunk in generate(n, seed, learnable):
            f.write(chunk)
            total += len(chunk)
    return total


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ingest.synthetic", description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("n", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--learnable", action="store_true", help="clicks depend on the ad's category and the user's age and gender"
    )
    args = parser.parse_args(argv)
    size = write(args.out, args.n, args.seed, args.learnable)
    print(f"wrote {args.n} samples, {size} bytes to {args.out}")


if __name__ == "__main__":
    sys.exit(main())
