"""Parse, check and compile feature-DSL expressions (docs/formats.md, the DSL) into op plans.

An expression is parsed once with lark (LALR, ``grammar.lark``), checked against the
features declared before it (every problem a ``DslError`` with a caret under the
offending column), and compiled into ``Plan``s: arrays of opcodes that
``ingest._native.dsl.run_plans`` interprets per row.  A part of an expression that reads
only aux-table features is computed once per aux line: it becomes a hidden plan on that
table, and the expression reads its result like a feature.
"""

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import lark
import numpy as np

from .._native import dsl as K
from ..errors import DslError
from ..features import FeatureType

__all__ = ["parse", "check", "check_feature", "compile_feature", "Plan", "FUNCTIONS"]


@dataclass(frozen=True)
class Name:
    name: str
    col: int


@dataclass(frozen=True)
class Number:
    value: float
    col: int


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple
    col: int


# function -> (fewest args, most args or None, numbers after the first argument?)
FUNCTIONS = {
    "cartesian": (2, None, False),
    "match": (2, None, False),
    "intersection": (2, None, False),
    "hash": (2, 2, True),
    "bucketize": (2, None, True),
    "log": (1, 1, False),
    "value": (1, 1, False),
    "sum": (1, 1, False),
    "count": (1, 1, False),
    "avg": (1, 1, False),
    "max": (1, 1, False),
    "min": (1, 1, False),
    "logsum": (1, 1, False),
    "logavg": (1, 1, False),
    "logmax": (1, 1, False),
    "logmin": (1, 1, False),
    "cosine": (2, 2, False),
    "dot": (2, 2, False),
}
_AGGREGATES = {"sum": K.SUM, "count": K.COUNT, "avg": K.AVG, "max": K.MAX, "min": K.MIN}
_SINGLE = set(_AGGREGATES) | {"logsum", "logavg", "logmax", "logmin", "cosine", "dot"}


@lru_cache(maxsize=1)
def _parser():
    grammar = resources.files(__package__).joinpath("grammar.lark").read_text()
    return lark.Lark(grammar, parser="lalr", propagate_positions=True)


def _fail(feature, text, col, message):
    raise DslError(
        f"feature {feature!r}: {message}\n  {text}\n  {' ' * (col - 1)}^", feature=feature, expression=text, column=col
    )


def parse(text, feature):
    """The syntax tree of ``text`` (Name, Number and Call nodes); a ``DslError`` when it is not DSL."""
    if not isinstance(text, str) or not text.strip():
        raise DslError(
            f"feature {feature!r}: dsl={text!r}, expected an expression such as 'cartesian(a, b)'",
            feature=feature,
            expression=text,
            column=1,
        )
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as exc:
        col = getattr(exc, "column", None)
        token = getattr(exc, "token", None)
        if not isinstance(col, int) or col < 1 or getattr(token, "type", None) == "$END":
            col = len(text) + 1
        got = repr(text[col - 1]) if col <= len(text) else "end of the expression"
        _fail(
            feature,
            text,
            col,
            f"syntax error at column {col}: unexpected {got}; an expression is a "
            "feature name or function(expression, ...)",
        )
    return _node(tree)


def _node(tree):
    if tree.data == "name":
        tok = tree.children[0]
        return Name(str(tok), tok.column)
    if tree.data == "number":
        tok = tree.children[0]
        return Number(float(tok), tok.column)
    func = tree.children[0]
    return Call(str(func), tuple(_node(c) for c in tree.children[1:]), func.column)


def check(node, text, feature, known):
    """Check ``node`` against ``known`` (name -> FeatureSpec of earlier declarations).

    Returns the tree with the expressions of DSL features it names substituted in (so
    it refers to parsed features only).
    """
    if isinstance(node, Number):
        _fail(feature, text, node.col, "a number where a feature or an expression is expected")
    if isinstance(node, Name):
        if node.name == feature:
            _fail(feature, text, node.col, f"the expression refers to {feature!r} itself (a cycle)")
        spec = known.get(node.name)
        if spec is None:
            _fail(feature, text, node.col, f"unknown feature {node.name!r}: declare it before the features using it")
        if spec.dsl is not None:
            return check(parse(spec.dsl, spec.name), spec.dsl, spec.name, known)
        return node
    if node.func not in FUNCTIONS:
        _fail(feature, text, node.col, f"unknown function {node.func!r}; known: {', '.join(sorted(FUNCTIONS))}")
    fewest, most, numbers = FUNCTIONS[node.func]
    n = len(node.args)
    if n < fewest or (most is not None and n > most):
        want = f"{fewest}" if fewest == most else f"at least {fewest}" if most is None else f"{fewest} to {most}"
        _fail(feature, text, node.col, f"{node.func}() takes {want} argument{'s' * (want != '1')}, got {n}")
    args = [check(node.args[0], text, feature, known)]
    for a in node.args[1:]:
        if numbers:
            if not isinstance(a, Number):
                _fail(feature, text, a.col, f"{node.func}() takes numbers after its first argument")
            args.append(a)
        else:
            args.append(check(a, text, feature, known))
    if node.func == "hash" and (args[1].value != int(args[1].value) or args[1].value < 1):
        _fail(feature, text, args[1].col, "hash() takes a whole number of buckets >= 1")
    if node.func == "bucketize":
        bounds = [a.value for a in args[1:]]
        for a, prev in zip(args[2:], bounds):
            if a.value < prev:
                _fail(feature, text, a.col, "bucketize() boundaries must not decrease")
    return Call(node.func, tuple(args), node.col)


def single_valued(node, specs):
    """True when the expression gives exactly one pair for every row (it may feed a dense feature)."""
    if isinstance(node, Name):
        spec = specs[node.name]
        return spec.type is FeatureType.dense and spec.width == 1
    if node.func in _SINGLE:
        return True
    if node.func in ("log", "value", "hash", "bucketize"):
        return single_valued(node.args[0], specs)
    if node.func == "cartesian":
        return all(single_valued(a, specs) for a in node.args)
    return False


def home_table(node, specs):
    """The shallowest table the expression reads: it can be computed once per line of that table."""
    if isinstance(node, Name):
        return specs[node.name].table
    return min(home_table(a, specs) for a in node.args if not isinstance(a, Number))


@dataclass(eq=False)
class Plan:
    """One compiled expression, run per row of ``table``.

    ``leaves`` name the features (or hidden plans) it reads, each ``(name, table, dense
    width or 0)``; ``program`` is what ``run_plans`` interprets (ops, constants, output
    register, register count).  ``hidden`` plans are parts computed on a deeper table and
    not emitted.
    """

    name: str
    table: int
    program: K.Program
    leaves: tuple
    dense: bool
    hidden: bool


class _Builder:
    def __init__(self, specs, table, hidden_tables):
        self.specs = specs
        self.table = table
        self.hidden_tables = hidden_tables
        self.ops = []
        self.consts = []
        self.leaves = []
        self.leaf_reg = {}
        self.nregs = 0

    def _op(self, op, a=0, b=0, c=0):
        dst = self.nregs
        self.nregs += 1
        self.ops.append((op, dst, a, b, c))
        return dst

    def emit(self, node):
        if isinstance(node, Name):
            if node.name not in self.leaf_reg:
                if node.name in self.hidden_tables:
                    leaf = (node.name, self.hidden_tables[node.name], 0)
                else:
                    spec = self.specs[node.name]
                    leaf = (node.name, spec.table, spec.width if spec.type is FeatureType.dense else 0)
                self.leaves.append(leaf)
                op = K.LEAF_DENSE if leaf[2] else K.LEAF_SPARSE
                self.leaf_reg[node.name] = self._op(op, len(self.leaves) - 1)
            return self.leaf_reg[node.name]
        f = node.func
        if f == "value":
            return self.emit(node.args[0])
        if f in ("cartesian", "match", "intersection"):
            op = K.CARTESIAN if f == "cartesian" else K.MATCH
            reg = self.emit(node.args[0])
            for a in node.args[1:]:
                reg = self._op(op, reg, self.emit(a))
            return reg
        if f in ("cosine", "dot"):
            return self._op(K.COSINE if f == "cosine" else K.DOT, self.emit(node.args[0]), self.emit(node.args[1]))
        x = self.emit(node.args[0])
        if f == "hash":
            return self._op(K.HASH, x, int(node.args[1].value))
        if f == "bucketize":
            first = len(self.consts)
            self.consts.extend(a.value for a in node.args[1:])
            return self._op(K.BUCKETIZE, x, first, len(node.args) - 1)
        if f == "log":
            return self._op(K.LOG, x)
        if f in _AGGREGATES:
            return self._op(_AGGREGATES[f], x)
        return self._op(K.LOG, self._op(_AGGREGATES[f[3:]], x))  # logsum, logavg, logmax, logmin


def compile_feature(spec, tree, specs):
    """The plans computing DSL feature ``spec`` (its checked ``tree``), hidden parts first.

    ``specs`` maps names to every declared FeatureSpec the tree reads.
    """
    plans = []
    hidden_tables = {}

    def hoist(node, table):
        """``node`` for a plan on ``table``: parts that read only deeper tables become hidden plans."""
        if isinstance(node, (Name, Number)):
            return node
        home = home_table(node, specs)
        if home > table:
            name = f"{spec.name}#{len(plans)}"
            plans.append(_plan(name, home, hoist(node, home), specs, hidden_tables, False, True))
            hidden_tables[name] = home
            return Name(name, node.col)
        return Call(node.func, tuple(hoist(a, table) for a in node.args), node.col)

    root = hoist(tree, spec.table)
    plans.append(_plan(spec.name, spec.table, root, specs, hidden_tables, spec.type is FeatureType.dense, False))
    return plans


def _plan(name, table, node, specs, hidden_tables, dense, hidden):
    b = _Builder(specs, table, hidden_tables)
    out = b.emit(node)
    ops = np.array(b.ops, np.int64).reshape(len(b.ops), K.OP_COLUMNS)
    program = K.Program(ops, np.array(b.consts, np.float64), out, b.nregs).checked()
    return Plan(name, table, program, tuple(b.leaves), dense, hidden)


def check_feature(spec, known):
    """Check a DSL feature against the features declared before it; returns its checked tree."""
    tree = check(parse(spec.dsl, spec.name), spec.dsl, spec.name, known)
    home = home_table(tree, known)
    if spec.table > home:
        raise DslError(
            f"feature {spec.name!r}: table={spec.table}, but its expression reads table {home}; "
            f"a DSL feature lives in the shallowest table it reads ({home}) or a shallower one",
            feature=spec.name,
            expression=spec.dsl,
            column=1,
        )
    if spec.type is FeatureType.dense and not single_valued(tree, known):
        raise DslError(
            f"feature {spec.name!r}: a dense DSL feature needs an expression of one value per row "
            f"(an aggregate, cosine or dot), got\n  {spec.dsl}\n  ^",
            feature=spec.name,
            expression=spec.dsl,
            column=1,
        )
    return tree
