"""Lowering: layer instances and forward bodies to the primitive op graph.

`model.py` walks user layers and their forward bodies; the other modules lower the built-in
layer kinds, one family per module, each registering itself in `call.LOWERINGS`.
"""

from seqc.compiler.lower import (  # noqa: F401
    attention,
    dense,
    embedding,
    moe,
    norm,
    recurrent,
    speech,
)
from seqc.compiler.lower.call import LOWERINGS
from seqc.compiler.lower.model import lower_model

__all__ = ["LOWERINGS", "lower_model"]
