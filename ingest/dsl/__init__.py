"""The feature DSL (docs/formats.md, the DSL): expressions over declared features, computed per row.

``reader.feature(name, type, dsl="cartesian(item, clk_hist)")`` checks the expression at
once (``DslError``, with a caret under the offending column) and the reader computes the
feature in its parse workers, after parsing and before batching.  ``load_feature_conf``
reads XDL's ``Name=...;Type=...;Expr=...`` files; ``cross64`` is the key-crossing function.
"""

from .._native.dsl import cross64
from .compiler import FUNCTIONS
from .conf import load_feature_conf

__all__ = ["cross64", "load_feature_conf", "FUNCTIONS"]
