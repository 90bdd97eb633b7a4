"""XDL's feature configuration files: one ``Name=...;Type=Numeric|KV|ID;Expr=...`` per line."""

import contextlib
import io

from ..errors import ConfigError, DslError
from ..features import make_feature
from ..sources.filesystems import open_url
from .compiler import Call, Name, parse

__all__ = ["load_feature_conf", "located_at"]

# ASCII whitespace and the ideographic space (U+3000), which XDL's files allowed around fields
_SPACES = " \t\r\n\f\v\u3000"
_TYPES = {"numeric": ("dense", 1), "kv": ("sparse", None), "id": ("sparse", None)}


def load_feature_conf(path):
    """The DSL features of a conf file, as FeatureSpecs in dependency order.

    Blank lines and lines starting with ``#`` are skipped.  ``Type=Numeric`` is a dense
    feature of one value; ``KV`` and ``ID`` are sparse (batches always carry values; for
    ``ID`` they are whatever the expression gives).  Entries may use each other in any
    order; a cycle is a ``DslError``.  Declare them with ``reader.features(specs)`` after
    the features they read.
    """
    entries = {}
    with open_url(path, "rb") as raw:
        data = raw.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # the whole file is read and checked first: a decoder reading it by lines knows no byte offset
        before = data[: exc.start].decode("utf-8")
        line = before.replace("\r\n", "\n").replace("\r", "\n").count("\n") + 1
        raise ConfigError(
            f"{path}:{line}: byte {exc.start}: {data[exc.start : exc.end]!r} is not UTF-8 ({exc.reason}); "
            "a conf file is UTF-8 text"
        ) from None
    with io.StringIO(text, newline=None) as f:  # lines as a text file gives them: \r\n and \r end one too
        for lineno, line in enumerate(f, 1):
            line = line.strip(_SPACES)
            if not line or line.startswith("#"):
                continue
            fields = {}
            for part in line.split(";"):
                if not part.strip(_SPACES):
                    continue
                key, sep, value = part.partition("=")
                key = key.strip(_SPACES).lower()
                if not sep or key not in ("name", "type", "expr") or key in fields:
                    raise ConfigError(
                        f"{path}:{lineno}: {part.strip(_SPACES)!r}: expected Name=..., Type=... "
                        "and Expr=... once each, separated by ';'"
                    )
                fields[key] = value.strip(_SPACES)
            missing = [k for k in ("name", "type", "expr") if k not in fields]
            if missing:
                raise ConfigError(f"{path}:{lineno}: missing {', '.join(k.capitalize() for k in missing)}=")
            kind = _TYPES.get(fields["type"].lower())
            if kind is None:
                raise ConfigError(f"{path}:{lineno}: Type={fields['type']!r}, expected Numeric, KV or ID")
            name = fields["name"]
            if name in entries:
                raise ConfigError(f"{path}:{lineno}: feature {name!r} is defined twice")
            with located_at((path, lineno)):
                spec = make_feature(name, kind[0], nvec=kind[1], dsl=fields["expr"], origin=(path, lineno))
                tree = parse(spec.dsl, name)
            entries[name] = (spec, tree)
    return _dependency_order(entries)


@contextlib.contextmanager
def located_at(origin):
    """A ``ConfigError`` about a feature raised inside is raised again told of the conf file entry the feature comes
    from: ``origin`` is ``(file, line)`` (a FeatureSpec's), which lead the message and are a ``DslError``'s
    ``source`` and ``line``; with ``origin`` None it passes as it is."""
    try:
        yield
    except ConfigError as exc:
        if origin is None:
            raise
        path, lineno = origin
        if isinstance(exc, DslError):
            located = DslError(
                f"{path}:{lineno}: {exc}",
                feature=exc.feature,
                expression=exc.expression,
                column=exc.column,
                source=path,
                line=lineno,
            )
        else:
            located = ConfigError(f"{path}:{lineno}: {exc}")
        raise located from None


def _dependency_order(entries):
    """The specs of ``entries`` (name -> (spec, its parsed expression)), each after the entries it names: a
    depth-first walk with a stack of its own, as a chain of entries may be longer than Python's recursion limit."""
    order = []
    state = {}  # name -> 1 while on the stack, 2 when placed
    for root in entries:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, _names(entries[root][1]))]
        while stack:
            name, refs = stack[-1]
            for ref in refs:
                if ref.name not in entries or state.get(ref.name) == 2:
                    continue
                if state.get(ref.name) == 1:
                    spec = entries[name][0]
                    with located_at(spec.origin):
                        raise DslError(
                            f"feature {name!r}: {ref.name!r} depends on {name!r} (a cycle)"
                            f"\n  {spec.dsl}\n  {' ' * (ref.col - 1)}^",
                            feature=name,
                            expression=spec.dsl,
                            column=ref.col,
                        )
                state[ref.name] = 1
                stack.append((ref.name, _names(entries[ref.name][1])))
                break
            else:
                stack.pop()
                state[name] = 2
                order.append(entries[name][0])
    return order


def _names(node):
    if isinstance(node, Name):
        yield node
    elif isinstance(node, Call):
        for a in node.args:
            yield from _names(a)
