"""Parse, check and compile feature-DSL expressions (docs/formats.md, the DSL) into op plans.

An expression is parsed once with lark (LALR, ``grammar.lark``), checked against the
features declared before it (every problem a ``DslError`` with a caret under the
offending column), and compiled into ``Plan``s: arrays of opcodes that
``ingest._native.dsl.run_plans`` interprets per row.  A part of an expression that reads
only aux-table features is computed once per aux line: it becomes a hidden plan on that
table, and the expression reads its result like a feature.
"""

import math
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from importlib import resources

import lark
import numpy as np

from .._native import dsl as K
from ..errors import DslError
from ..features import FeatureType

__all__ = [
    "parse",
    "check",
    "check_feature",
    "compile_feature",
    "Plan",
    "FUNCTIONS",
    "MAX_DEPTH",
    "MAX_PARTS",
    "MAX_BUCKETS",
    "HIDDEN_MARK",
]

# Bounds on an expression with the DSL features it names substituted in, counted while it is checked, so that
# a check stops within MAX_PARTS steps: the later passes recurse once a level, and a chain of features each
# naming the one before twice doubles in size with each feature.
MAX_DEPTH = 64  # levels: each function call, and each DSL feature named (its expression substituted in)
MAX_PARTS = 65536  # names, numbers and calls
# hash() buckets: an int64 operand of the kernel, the divisor of a non-negative int64 key
MAX_BUCKETS = 2**63 - 1
# a hidden plan is named "<feature>:<n>"; make_feature refuses ':' in names, so no declared feature has it
HIDDEN_MARK = ":"


@dataclass(frozen=True)
class Name:
    name: str
    col: int


@dataclass(frozen=True)
class Number:
    value: float
    col: int
    text: str = ""  # as written: hash() takes its buckets exactly, not through a float


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
    _check_nesting(text, feature)
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


def _check_nesting(text, feature):
    """A ``DslError`` at the first call nested deeper than ``MAX_DEPTH``, before the tree is built (each pass over
    it recurses once a level).  A name holds no parenthesis, so their nesting is that of the calls."""
    depth = 0
    for col, char in enumerate(text, 1):
        if char == "(":
            depth += 1
            if depth > MAX_DEPTH:
                _fail(feature, text, col, f"the expression nests deeper than {MAX_DEPTH} levels (a call is a level)")
        elif char == ")":
            depth -= 1


def _node(tree):
    if tree.data == "name":
        tok = tree.children[0]
        return Name(str(tok), tok.column)
    if tree.data == "number":
        tok = tree.children[0]
        return Number(float(tok), tok.column, str(tok))
    func = tree.children[0]
    return Call(str(func), tuple(_node(c) for c in tree.children[1:]), func.column)


class _Walk:
    """One check of a declared feature's expression: the parts met so far, the parsed DSL features it names."""

    def __init__(self, text, feature):
        self.text = text
        self.feature = feature
        self.parts = 0
        self.trees = {}  # DSL feature name -> its parsed expression, parsed once however often it is named

    def enter(self, col, depth, at):
        """Count a part ``depth`` levels deep; a ``DslError`` beyond the limits.  ``at`` is the column, in the
        declared expression, of the DSL feature whose substituted expression holds the part (None when the part
        is in the declared expression itself, at ``col``)."""
        self.parts += 1
        if depth <= MAX_DEPTH and self.parts <= MAX_PARTS:
            return
        if at is None:
            message = "the expression"
        else:
            message = "with the DSL features it names substituted in, the expression"
        if depth > MAX_DEPTH:
            message += f" nests deeper than {MAX_DEPTH} levels (a call, or a DSL feature named, is a level)"
        else:
            message += f" has more than {MAX_PARTS:,} parts (names, numbers and calls)"
        _fail(self.feature, self.text, col if at is None else at, message)


def check(node, text, feature, known):
    """Check ``node`` against ``known`` (name -> FeatureSpec of earlier declarations).

    Returns the tree with the expressions of DSL features it names substituted in (so
    it refers to parsed features only).  That tree is at most ``MAX_DEPTH`` levels deep and
    has at most ``MAX_PARTS`` parts.
    """
    return _check(node, text, feature, known, _Walk(text, feature), 0, None)


def _check(node, text, feature, known, walk, depth, at):
    """``check`` of ``node``, ``depth`` levels below the declared expression's root; ``at`` as in ``_Walk.enter``."""
    if isinstance(node, Number):
        _fail(feature, text, node.col, "a number where a feature or an expression is expected")
    if isinstance(node, Name):
        if node.name == feature:
            _fail(feature, text, node.col, f"the expression refers to {feature!r} itself (a cycle)")
        spec = known.get(node.name)
        if spec is None:
            _fail(feature, text, node.col, f"unknown feature {node.name!r}: declare it before the features using it")
        if spec.dsl is not None:
            walk.enter(node.col, depth + 1, at)
            tree = walk.trees.get(spec.name)
            if tree is None:
                tree = walk.trees[spec.name] = parse(spec.dsl, spec.name)
            return _check(tree, spec.dsl, spec.name, known, walk, depth + 1, node.col if at is None else at)
        walk.enter(node.col, depth, at)
        return node
    walk.enter(node.col, depth + 1, at)
    if node.func not in FUNCTIONS:
        _fail(feature, text, node.col, f"unknown function {node.func!r}; known: {', '.join(sorted(FUNCTIONS))}")
    fewest, most, numbers = FUNCTIONS[node.func]
    n = len(node.args)
    if n < fewest or (most is not None and n > most):
        want = f"{fewest}" if fewest == most else f"at least {fewest}" if most is None else f"{fewest} to {most}"
        _fail(feature, text, node.col, f"{node.func}() takes {want} argument{'s' * (want != '1')}, got {n}")
    args = [_check(node.args[0], text, feature, known, walk, depth + 1, at)]
    for a in node.args[1:]:
        if numbers:
            if not isinstance(a, Number):
                _fail(feature, text, a.col, f"{node.func}() takes numbers after its first argument")
            walk.enter(a.col, depth + 1, at)
            args.append(_number(node.func, a, text, feature))
        else:
            args.append(_check(a, text, feature, known, walk, depth + 1, at))
    if node.func == "bucketize":
        bounds = [a.value for a in args[1:]]
        for a, prev in zip(args[2:], bounds):
            if a.value < prev:
                _fail(feature, text, a.col, "bucketize() boundaries must not decrease")
    return Call(node.func, tuple(args), node.col)


def _number(func, number, text, feature):
    """The number argument of ``func``, as the kernel takes it: hash()'s buckets an exact int in 1..MAX_BUCKETS,
    a bucketize() boundary a finite float64."""
    shown = number.text or repr(number.value)
    if func == "hash":
        exact = Decimal(shown)
        if not exact.is_finite() or not 1 <= exact <= MAX_BUCKETS or exact != exact.to_integral_value():
            _fail(
                feature,
                text,
                number.col,
                f"hash() takes a whole number of buckets from 1 to 2**63 - 1 ({MAX_BUCKETS}), got {shown}",
            )
        return Number(int(exact), number.col, number.text)
    if not math.isfinite(number.value):
        _fail(feature, text, number.col, f"{shown} is beyond the range of float64 (about 1.8e308)")
    return number


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
            return self._op(K.HASH, x, node.args[1].value)  # an int within int64 (_number)
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
            name = f"{spec.name}{HIDDEN_MARK}{len(plans)}"
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
