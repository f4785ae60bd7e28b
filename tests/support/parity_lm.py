"""The tiny LM of the training-parity tests, its fixed batches, and both backends' models of it.

`test_tf_train_parity.py` trains it on JAX and TF from the same params; the sharded and
placed runs (`test_spmd.py`, `test_tf_sync.py`, `test_tf_placement.py`, whose child processes
import this module) and the sampled criteria (`test_sampled.py`) reuse it. Its vocabulary is
fixed (`VOCAB`), so it compiles without reading a corpus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from lowering_helpers import params_of

from seqc.backends.jax.train import JaxModel
from seqc.compiler.compile import CompiledTask
from seqc.compiler.config import TrainConfig

if TYPE_CHECKING:
    from seqc.backends.tf.train import TfModel

VOCAB = 20
B, T = 4, 12

SPEC = """seqc 1
input tiny {{
  train = text("train.txt")
  tokenizer = chars()
}}
layer Block(d: int, heads: int) {{
  norm1 = LayerNorm(d)
  attn = SelfAttention(d, heads, causal = true, bias = false)
  norm2 = LayerNorm(d)
  mlp = FeedForward(d, 2 * d, activation = "gelu")
  forward (x: float32[B, T, d]) -> float32[B, T, d] {{
    x = x + attn(norm1(x))
    return x + mlp(norm2(x))
  }}
}}
model LM(vocab: int, d: int = 16, heads: int = 2) {{
  embed = Embedding(vocab, d)
  pos = SinusoidalPosition(d)
  blocks = repeat(1) Block(d, heads)
  norm = LayerNorm(d)
  out = Softmax(vocab, d, tie = embed)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {{
    return out(norm(blocks(pos(embed(ids)))))
  }}
}}
task lm {{
  input = tiny
  model = LM(vocab = input.vocab_size)
  loss = cross_entropy(label_smoothing = 0.1)
}}
experiment tiny {{
  tasks = [lm]
  train {{
    steps = 50
    clip_norm = 0.5
  }}
}}
"""


@dataclass
class Batch:
    arrays: dict[str, np.ndarray]
    task: str = "lm"


def batches(n: int, seed: int = 0) -> list[Batch]:
    """Fixed LM batches: rows count up from a random start (mod VOCAB), so there is something to
    learn; right padding of a few lengths."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        start = rng.integers(0, VOCAB, (B, 1))
        seq = ((start + np.arange(T + 1)[None, :]) % VOCAB).astype(np.int32)
        lengths = np.array([T, T - 3, T, 5])
        mask = np.arange(T)[None, :] < lengths[:, None]
        out.append(Batch({"inputs": seq[:, :-1], "targets": seq[:, 1:], "mask": mask}))
    return out


def models(compiled: CompiledTask, train: TrainConfig) -> tuple[JaxModel, dict, TfModel]:
    """Both models from the same params: `params_of` puts noise on the zero- and one-initialised
    ones, so that no param starts at zero (after a first Adam step such a param would be its
    own update, lr * g / (|g| + eps), which roundoff in a g near eps moves relatively much).
    TF is imported here, not with the module: its JAX-only users (the sampled criteria, the
    mesh tests' child) would pay TensorFlow's import (about 4.5 CPU-s) for nothing."""
    from seqc.backends.tf.train import TfModel

    params = params_of(compiled.graph)
    jm = JaxModel(compiled, train)
    state = jm.with_params(params)
    tm = TfModel(compiled, train)
    tm.init_from(params)
    return jm, state, tm
