"""Compiler passes on the op graph: functions Graph -> Graph that a training step runs faster.

A lowered graph is what each layer kind wrote on its own; a pass sees the whole step and
rewrites it (`PASSES`, in the order they run). Every pass keeps the layer path and span of what
it rewrites on the ops it creates, keeps params and their names (so checkpoints are unchanged),
and computes the same function: tests compare each pass against the unpassed graph on every
example. An experiment lists the passes it wants in `compile { passes = [...] }` (default:
`DEFAULT_PASSES`); `seqc show --graph --passes` prints what each one did.
"""

from __future__ import annotations

from seqc.compiler.passes.base import Pass, PassReport, run_passes
from seqc.compiler.passes.cse import cse
from seqc.compiler.passes.dce import dce
from seqc.compiler.passes.fuse_attention import fuse_attention
from seqc.compiler.passes.fuse_matmul import fuse_matmul
from seqc.spec.catalogue import blocks as catalogue

PASSES: dict[str, Pass] = {
    p.name: p
    for p in (
        Pass("fuse_matmul", fuse_matmul, "sibling matmuls that read one input become one"),
        Pass(
            "fuse_attention",
            fuse_attention,
            "scores, mask, softmax and weighted sum become one attention op",
        ),
        Pass("cse", cse, "identical ops on identical inputs computed once"),
        Pass("dce", dce, "ops nothing reads removed"),
    )
}
"""Every pass, by name, in the order `run_passes` applies a selection of them."""

LOSS_PASS = "fuse_loss"
"""The pass over the model and its criterion together, which `compile_task` applies (a graph
pass sees the model's graph alone): the output layer and the cross-entropy as one op
(`seqc.compiler.lower.fused_loss`). It runs first."""
LOSS_PASS_DOC = "the Softmax output layer and the cross-entropy become one chunked op"

DEFAULT_PASSES: tuple[str, ...] = tuple(catalogue.DEFAULT_PASSES)
"""What an experiment runs unless its `compile { passes = [...] }` says otherwise."""

assert (LOSS_PASS, *PASSES) == catalogue.PASS_NAMES, "the catalogue names the passes, in order"

__all__ = [
    "DEFAULT_PASSES",
    "LOSS_PASS",
    "LOSS_PASS_DOC",
    "PASSES",
    "Pass",
    "PassReport",
    "run_passes",
]
