"""The incremental-decoding pass: encoder + one-position step graph with caches.

The oracle is the full forward pass: run the step graph position by position, feeding each
step's caches to the next, and the logits at every position must equal the full forward's
logits at that position (JAX interpreter, fp32, each graph traced once in `jax.jit`). Models
that cannot decode step by step are rejected at the offending layer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
import pytest
from lowering_helpers import params_of

from seqc.backends.jax.ops import Ctx, run_graph
from seqc.compiler.compile import compile_task
from seqc.compiler.graph import Graph
from seqc.compiler.incremental import POS, incremental, stepping_inputs
from seqc.compiler.signature import input_fields
from seqc.compiler.step_signature import StepSignature
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.spec.errors import CheckError

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 40
EXAMPLES = [
    ("lm/shakespeare.seq", "lm.shakespeare.quick", "shakespeare", ["lm.model.d=32"]),
    ("mt/bible_transformer.seq", "mt.bible.transformer.smoke", "bible_en_es", []),
    ("mt/lstm_attention.seq", "mt.bible.lstm", "bible_en_es", []),
]


def _graph(spec: str, experiment: str, input_name: str, sets: list[str]) -> Graph:
    program = load_program(ROOT / "examples" / spec)
    resolved = resolve(program, experiment, sets, symbols={f"{input_name}.vocab_size": VOCAB})
    task = resolved.tasks[0]
    return compile_task(program, resolved, task).graph


def _compiled(graph: Graph) -> Callable[[dict, dict], list[np.ndarray]]:
    """The graph traced once inside `jax.jit`, as the backends run it: one program each, where
    op by op every op compiles a program of its own (and the step's, at every position, are
    dispatched again)."""
    ctx = Ctx(rng=None, training=False, compute_dtype=jax.numpy.float32)
    fn = jax.jit(lambda params, inputs: run_graph(graph, params, inputs, ctx))
    return lambda params, inputs: [np.asarray(y) for y in fn(params, inputs)]


@pytest.mark.parametrize(("spec", "experiment", "input_name", "sets"), EXAMPLES)
def test_step_by_step_logits_equal_the_full_forward(
    spec: str, experiment: str, input_name: str, sets: list[str]
) -> None:
    graph = _graph(spec, experiment, input_name, sets)
    params = params_of(graph, seed=3)
    program = incremental(graph, stepping_inputs(graph))
    rng = np.random.default_rng(0)
    batch, length, src_len = 3, 9, 7
    tgt = rng.integers(1, VOCAB, (batch, length)).astype(np.int32)
    inputs: dict[str, np.ndarray] = {}
    for name, vid in graph.inputs.items():
        if name in program.stepping:
            inputs[name] = tgt
        elif graph.ops[vid].type.dtype == "bool":
            inputs[name] = np.arange(src_len)[None, :] < np.array([[7], [4], [6]])
        else:
            inputs[name] = rng.integers(1, VOCAB, (batch, src_len)).astype(np.int32)
    (full,) = _compiled(graph)(params, inputs)

    memory: dict[str, np.ndarray] = {}
    if program.encoder is not None:
        enc_in = {k: v for k, v in inputs.items() if k in program.encoder.inputs}
        memory = dict(
            zip(program.encoder_outputs, _compiled(program.encoder)(params, enc_in), strict=True)
        )
    buffer = 12
    caches = StepSignature.of(program, input_fields(graph)).zero_caches(batch, buffer)
    step = _compiled(program.step)
    for pos in range(length):
        feeds = {name: tgt[:, pos : pos + 1] for name in program.stepping}
        feeds |= {POS: np.asarray(pos, np.int32), **memory, **caches}
        logits, *new = step(params, feeds)
        assert logits.shape == (batch, 1, full.shape[-1])
        np.testing.assert_allclose(logits[:, 0], full[:, pos], atol=2e-5, rtol=1e-5)
        caches = dict(zip([c.name for c in program.caches], new, strict=True))
    kinds = {c.kind for c in program.caches}
    assert kinds == ({"state"} if "lstm" in experiment else {"history"})


def test_a_non_causal_decoder_is_rejected_at_its_layer(tmp_path: Path) -> None:
    spec = (ROOT / "examples" / "common" / "transformer.seq").read_text()
    (tmp_path / "common.seq").write_text(spec)
    (tmp_path / "lm.seq").write_text(
        """seqc 1
import "common.seq"
input tiny {
  train = text("train.txt")
  tokenizer = chars()
}
model Bad(vocab: int, d: int = 16) {
  embed = Embedding(vocab, d)
  attn = SelfAttention(d, 2, causal = false)
  out = Softmax(vocab, d)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {
    return out(attn(embed(ids)))
  }
}
task lm {
  input = tiny
  model = Bad(vocab = input.vocab_size)
}
experiment bad {
  tasks = [lm]
}
"""
    )
    program = load_program(tmp_path / "lm.seq")
    resolved = resolve(program, "bad", symbols={"tiny.vocab_size": VOCAB})
    graph = compile_task(program, resolved, "lm").graph
    with pytest.raises(CheckError) as e:
        incremental(graph, stepping_inputs(graph))
    assert e.value.code == "not-incremental"
    assert "`attn`" in e.value.message
    assert e.value.span is not None and e.value.span.line == 12
