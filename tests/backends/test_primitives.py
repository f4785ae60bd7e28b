"""Every op the lowering emits is a declared primitive that every backend implements, so a
new primitive cannot reach one backend and not the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqc.backends.jax.ops import OPS as JAX_OPS
from seqc.backends.tf.ops import OPS as TF_OPS
from seqc.compiler.compile import compile_task
from seqc.compiler.graph import FUSED, PRIMITIVES
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program

ROOT = Path(__file__).resolve().parents[2]
# Ops the interpreters handle themselves rather than through the table.
STRUCTURAL = {"input", "param", "scan"}

EXAMPLES = [
    ("lm/shakespeare.seq", "lm.shakespeare.tiny"),
    ("mt/bible_transformer.seq", "mt.bible.transformer"),
    ("mt/lstm_attention.seq", "mt.bible.lstm"),
]


@pytest.mark.parametrize("backend", [JAX_OPS, TF_OPS], ids=["jax", "tf"])
def test_backends_implement_every_primitive(backend: dict) -> None:
    """The training backends also run what the compiler's passes make (`FUSED`)."""
    missing = (PRIMITIVES | FUSED) - STRUCTURAL - set(backend)
    assert not missing, missing


@pytest.mark.parametrize(("spec", "experiment"), EXAMPLES)
def test_lowered_examples_use_only_primitives(spec: str, experiment: str) -> None:
    program = load_program(ROOT / "examples" / spec)
    r = resolve(program, experiment)
    compiled = compile_task(program, r, r.tasks[0])
    graph = compiled.graph
    kinds = {op.kind for op in graph.ops}
    kinds |= {op.kind for op in compiled.eval_criterion.ops}
    for body in graph.subgraphs.values():
        kinds |= {op.kind for op in body.ops}
    assert kinds <= PRIMITIVES, kinds - PRIMITIVES
