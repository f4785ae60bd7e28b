"""Two tiny models trained on toy tasks, for the decoding tests to decode from.

An LM whose lines count up from a random token and end after a random length, and an
encoder-decoder that reverses its source (width 32, one layer, 50 tokens, `STEPS` Adam steps on
TF): EOS arrives at various steps, beam search keeps finished and open hypotheses side by side,
and decisions are rarely near ties. `test_tf_decode.py` checks the in-graph decoder on them;
`test_stepdecode.py` and `test_stepbatch.py` the step-graph decoders. The fixtures are module
scoped: import them into a test module (`from toy_decoding import lm as lm`); the models
themselves are trained once per session (`ToyModels`, the `toy_models` fixture).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shared_runs import once

from seqc.backends.tf.train import TfModel
from seqc.compiler.compile import compile_task
from seqc.compiler.config import DecodeConfig, TrainConfig
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.resolve.values import CallValue
from seqc.run.train.schedule import learning_rate
from seqc.spec.kinds import REGISTRY

VOCAB = 50
PAD, BOS, EOS = 0, 1, 2
FIRST = 3  # the first ordinary token
T = 16  # training length
STEPS = 150

LAYERS = """
layer Block(d: int, heads: int) {
  norm1 = LayerNorm(d)
  attn = SelfAttention(d, heads, causal = true)
  norm2 = LayerNorm(d)
  cross = CrossAttention(d, heads)
  norm3 = LayerNorm(d)
  mlp = FeedForward(d, 2 * d, activation = "gelu")
  forward (x: float32[B, T, d], mem: float32[B, S, d], mask: bool[B, S]) -> float32[B, T, d] {
    x = x + attn(norm1(x))
    x = x + cross(norm2(x), mem, mask = mask)
    return x + mlp(norm3(x))
  }
}
layer CausalBlock(d: int, heads: int) {
  norm1 = LayerNorm(d)
  attn = SelfAttention(d, heads, causal = true)
  norm2 = LayerNorm(d)
  mlp = FeedForward(d, 2 * d, activation = "gelu")
  forward (x: float32[B, T, d]) -> float32[B, T, d] {
    x = x + attn(norm1(x))
    return x + mlp(norm2(x))
  }
}
"""

SPEC = f"""seqc 1
input lines {{
  train = text("train.txt")
  tokenizer = chars()
}}
input pairs {{
  train = tsv("train.tsv", source = 0, target = 1)
  tokenizer = chars()
}}
{LAYERS}
model LM(vocab: int, d: int = 32, heads: int = 2) {{
  embed = Embedding(vocab, d)
  pos = SinusoidalPosition(d)
  block = CausalBlock(d, heads)
  norm = LayerNorm(d)
  out = Softmax(vocab, d)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {{
    return out(norm(block(pos(embed(ids)))))
  }}
}}
model Seq2Seq(vocab: int, d: int = 32, heads: int = 2) {{
  embed = Embedding(vocab, d)
  pos = SinusoidalPosition(d)
  encoder = SelfAttention(d, heads)
  enc_norm = LayerNorm(d)
  decoder = Block(d, heads)
  dec_norm = LayerNorm(d)
  out = Softmax(vocab, d)
  forward (src: int32[B, S], src_mask: bool[B, S], tgt: int32[B, T]) -> float32[B, T, vocab] {{
    x = pos(embed(src))
    memory = enc_norm(x + encoder(x, mask = src_mask))
    return out(dec_norm(decoder(pos(embed(tgt)), memory, mask = src_mask)))
  }}
}}
task lm {{
  input = lines
  model = LM(vocab = input.vocab_size)
}}
task translate {{
  input = pairs
  model = Seq2Seq(vocab = input.vocab_size)
}}
experiment lm {{
  tasks = [lm]
  train {{ optimizer = adam(lr = 1e-2) }}
}}
experiment mt {{
  tasks = [translate]
  train {{ optimizer = adam(lr = 1e-2) }}
}}
"""


@dataclass
class Batch:
    arrays: dict[str, np.ndarray]
    task: str


@dataclass
class Setup:
    """A trained tiny model, its task kind, and the inputs the tests decode from."""

    model: TfModel
    task: str
    prompts: list[list[int]]
    sources: list[list[int] | None]


def strategy(kind: str, **args: Any) -> DecodeConfig:
    """A decode call with the catalogue's defaults filled in, as resolve gives it, typed as
    `compile_task` gives it to every decoder."""
    spec = REGISTRY.get("decode", kind)
    assert spec is not None, kind
    full = {p.name: p.default for p in spec.params if not p.required} | args
    return DecodeConfig.of(CallValue(kind=kind, namespace="decode", args=full))


def successor(x: int) -> int:
    return FIRST + (x - FIRST + 1) % (VOCAB - FIRST)


def lm_batch(rng: np.random.Generator, rows: int = 32) -> Batch:
    """Lines that count up from a random token for 2 to 11 tokens, then EOS."""
    seq = np.full((rows, T + 1), PAD, np.int32)
    for b in range(rows):
        x, toks = int(rng.integers(FIRST, VOCAB)), [BOS]
        for _ in range(rng.integers(2, 12)):
            toks.append(x)
            x = successor(x)
        seq[b, : len(toks) + 1] = [*toks, EOS]
    return Batch({"inputs": seq[:, :-1], "targets": seq[:, 1:], "mask": seq[:, 1:] != PAD}, "lm")


def mt_batch(rng: np.random.Generator, rows: int = 32) -> Batch:
    """Sources of 2 to 9 random tokens and EOS; targets the reversed source."""
    src, tgt = np.full((rows, T), PAD, np.int32), np.full((rows, T + 1), PAD, np.int32)
    for b in range(rows):
        words = rng.integers(FIRST, VOCAB, rng.integers(2, 10)).tolist()
        src[b, : len(words) + 1] = [*words, EOS]
        tgt[b, : len(words) + 2] = [BOS, *words[::-1], EOS]
    arrays = {"src": src, "src_mask": src != PAD, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}
    return Batch(arrays | {"tgt_mask": tgt[:, 1:] != PAD}, "seq2seq")


def untrained(spec: Path, experiment: str) -> tuple[TfModel, TrainConfig]:
    """The experiment's model, before any step, and its train block."""
    program = load_program(spec)
    resolved = resolve(
        program, experiment, symbols={"lines.vocab_size": VOCAB, "pairs.vocab_size": VOCAB}
    )
    train = TrainConfig.of(resolved.config["train"])
    return TfModel(compile_task(program, resolved, resolved.tasks[0]), train), train


def trained(
    spec: Path, experiment: str, make_batch: Callable[[np.random.Generator], Batch], seed: int = 0
) -> TfModel:
    """The experiment's model after `STEPS` Adam steps on `make_batch`'s toy data."""
    model, train = untrained(spec, experiment)
    model.init(seed)
    rng, rate = np.random.default_rng(seed), learning_rate(train)
    for step in range(STEPS):
        model.train_step(model.state, make_batch(rng), rate(step))
    return model


class ToyModels:
    """The toy LM (`"lm"`) and encoder-decoder (`"mt"`), trained once for the whole session:
    the first worker to ask trains one and saves its params (`shared_runs.once`), and each
    worker builds the model from them once, for every test module that decodes with it. The
    decoders read only the params, which are the trained model's."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._models: dict[str, TfModel] = {}

    def model(self, experiment: str) -> TfModel:
        if experiment not in self._models:
            folder = once(self.root / experiment, lambda f: _train_and_save(f, experiment))
            model, _ = untrained(folder / "toy.seq", experiment)
            model.init_from(dict(np.load(folder / "params.npz")))
            self._models[experiment] = model
        return self._models[experiment]


def _train_and_save(folder: Path, experiment: str) -> None:
    (folder / "toy.seq").write_text(SPEC)
    make_batch = {"lm": lm_batch, "mt": mt_batch}[experiment]
    model = trained(folder / "toy.seq", experiment, make_batch)
    np.savez(folder / "params.npz", **model.numpy_params())


@pytest.fixture(scope="module")
def lm(toy_models: ToyModels) -> Setup:
    """Prompts of several lengths, one long enough for a second buffer length (32)."""
    rng = np.random.default_rng(1)
    prompts = [[], [48], [48, 24], [20, 35, 47]] + [
        rng.integers(FIRST, VOCAB, n).tolist() for n in (1, 6)
    ]
    prompts.append(list(range(10, 20)))
    return Setup(toy_models.model("lm"), "lm", prompts, [None] * len(prompts))


@pytest.fixture(scope="module")
def mt(toy_models: ToyModels) -> Setup:
    """Sources of several lengths, one padded to a multiple of 16 as `score_translations` does."""
    rng = np.random.default_rng(2)
    sources: list[list[int] | None] = [
        [*rng.integers(FIRST, VOCAB, n).tolist(), EOS] for n in (2, 3, 5, 7, 9)
    ]
    sources.append([5, 9, 14, EOS] + [PAD] * 12)
    return Setup(toy_models.model("mt"), "seq2seq", [[]] * len(sources), sources)


def cases(setup: Setup) -> list[tuple[list[int], list[int] | None]]:
    return list(zip(setup.prompts, setup.sources, strict=True))
