"""Sample-group ops (``reader.add_op``): Python ops on ``SampleGroup`` messages and built-in block ops.

See ``docs/ops.md``.  ``OpStage(schema, ops)`` is the Block -> Block callable the parse
workers run, before the DSL stage.
"""

from .builtin import DebugOP, DenseToSparseOP, FilterOP
from ..errors import OpError
from .stage import BlockOp, OpStage, PythonOp, as_op

__all__ = ["OpStage", "BlockOp", "PythonOp", "as_op", "FilterOP", "DenseToSparseOP", "DebugOP", "OpError"]
