"""A slow pure-Python evaluator of the feature DSL, the twin of native/dsl.py (FORMATS.md section 4).

Expressions are nested tuples ``("func", arg, ...)`` or feature names; ``render`` writes
them as DSL text.  A sample is ``{name: [(key, value), ...]}`` for sparse features and
``{name: [v0, v1, ...]}`` for dense ones; every function follows the documented
semantics, in float64, in the documented order.
"""

import numpy as np

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
EPS = 1e-8


def _mix(x):
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK
    x ^= x >> 31
    return x


def cross64(a, b):
    """mix(mix(a + golden) ^ b) >> 1 over unsigned 64-bit words."""
    return _mix(_mix((a + GOLDEN) & MASK) ^ (b & MASK)) >> 1


def render(expr):
    if isinstance(expr, str):
        return expr
    if isinstance(expr, (int, float)):
        return repr(expr)
    return f"{expr[0]}({', '.join(render(a) for a in expr[1:])})"


def _log(v):
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.log(np.float64(v) + EPS))


def _aggregate(func, pairs):
    if func == "count":
        return [(0, float(len(pairs)))]
    if func in ("sum", "avg"):
        acc = 0.0
        for _, v in pairs:
            acc += v
        if func == "avg" and pairs:
            acc /= len(pairs)
        return [(0, acc)]
    key, acc = 0, 0.0
    for j, (k, v) in enumerate(pairs):
        if j == 0 or (v > acc if func == "max" else v < acc):
            key, acc = k, v
    return [(key, acc)]


def evaluate(expr, sample):
    """The (key, value) pairs of ``expr`` for one sample."""
    if isinstance(expr, str):
        got = sample[expr]
        if got and not isinstance(got[0], tuple):  # dense: positions are keys
            return [(j, float(v)) for j, v in enumerate(got)]
        return [(k, float(v)) for k, v in got]
    func, args = expr[0], expr[1:]
    if func == "value":
        return evaluate(args[0], sample)
    if func == "cartesian":
        out = evaluate(args[0], sample)
        for a in args[1:]:
            right = evaluate(a, sample)
            out = [(cross64(k1, k2), v1 * v2) for k1, v1 in out for k2, v2 in right]
        return out
    if func in ("match", "intersection"):
        out = evaluate(args[0], sample)
        for a in args[1:]:
            first = {}
            for k, v in evaluate(a, sample):
                first.setdefault(k, v)
            out = [(k, v * first[k]) for k, v in out if k in first]
        return out
    if func == "hash":
        return [(cross64(k, 0) % int(args[1]), v) for k, v in evaluate(args[0], sample)]
    if func == "bucketize":
        return [(sum(1 for b in args[1:] if b <= v), 1.0) for _, v in evaluate(args[0], sample)]
    if func == "log":
        return [(k, _log(v)) for k, v in evaluate(args[0], sample)]
    if func in ("sum", "count", "avg", "max", "min"):
        return _aggregate(func, evaluate(args[0], sample))
    if func in ("logsum", "logavg", "logmax", "logmin"):
        [(k, v)] = _aggregate(func[3:], evaluate(args[0], sample))
        return [(k, _log(v))]
    if func in ("cosine", "dot"):
        x, y = evaluate(args[0], sample), evaluate(args[1], sample)
        m = min(len(x), len(y))
        dot = na = nb = 0.0
        for j in range(m):
            dot += x[j][1] * y[j][1]
            na += x[j][1] * x[j][1]
            nb += y[j][1] * y[j][1]
        return [(0, dot if func == "dot" else dot / (np.sqrt(na) * np.sqrt(nb) + EPS))]
    raise ValueError(f"unknown function {func}")
