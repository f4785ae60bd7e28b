"""Exported artifacts for the server's tests, made once per test session (`once`).

A translator (the toy reverser of `tests/run/test_export.py`'s `MT_SPEC`, trained 60 steps on
JAX) exported to ONNX and TFLite, and the session's tiny LM exported to ONNX: what `seqc serve`
loads. Each is made by the first test that asks, under a lock every xdist worker sees.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest
from shared_runs import LmRuns, once
from tiny_specs import COMMON, LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.resolve.program import SEQC_PATH

MT_SPEC = """seqc 1
import "{common}"
input pairs {{
  train = tsv("train.tsv", source = 0, target = 1)
  dev = tsv("dev.tsv", source = 0, target = 1)
  tokenizer = chars()
  buckets = {{16: 16}}
}}
model MT(vocab: int, d: int = 32, heads: int = 2) {{
  embed = Embedding(vocab, d)
  pos = SinusoidalPosition(d)
  encoder = repeat(1) EncoderBlock(d, heads, dropout = 0.0)
  enc_norm = LayerNorm(d)
  decoder = repeat(1) DecoderBlock(d, heads, dropout = 0.0)
  dec_norm = LayerNorm(d)
  out = Softmax(vocab, d, tie = embed)
  forward (src: int32[B, S], src_mask: bool[B, S], tgt: int32[B, T]) -> float32[B, T, vocab] {{
    memory = enc_norm(encoder(pos(embed(src)), mask = src_mask))
    return out(dec_norm(decoder(pos(embed(tgt)), memory, memory_mask = src_mask)))
  }}
}}
task translate {{
  input = pairs
  model = MT(vocab = input.vocab_size)
  decode = greedy(max_length = 12)
  metrics = [bleu]
}}
experiment mt {{
  tasks = [translate]
  train {{
    optimizer = adam(lr = 3e-3)
    steps = 60
    log_every = 20
    eval_every = 0
    checkpoint_every = 0
  }}
}}
"""


@dataclass(frozen=True)
class Served:
    """The session's artifacts, and the arguments that decode with their runs' checkpoints."""

    mt_spec: list[str]
    mt_run: Path
    lm_spec: list[str]
    lm_run: Path

    def artifact(self, which: str, name: str = "onnx-none") -> Path:
        return (self.mt_run if which == "mt" else self.lm_run) / "export" / name


def _pairs(folder: Path) -> None:
    rng = random.Random(0)
    for split, n in (("train", 400), ("dev", 24)):
        rows = []
        for _ in range(n):
            word = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 6)))
            rows.append(f"{word}\t{word[::-1]}")
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")


def _invoke(args: list[str], root: Path) -> None:
    from seqc.cli import app

    with pytest.MonkeyPatch.context() as mp:  # conftest's library root, for a session fixture
        mp.setenv(SEQC_PATH, str(root))
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output


def _make_mt(folder: Path) -> None:
    _pairs(folder)
    (folder / "mt.seq").write_text(MT_SPEC.format(common=COMMON.as_posix()))
    base = [str(folder / "mt.seq"), "-e", "mt", "--cache-dir", str(folder / "cache")]
    run = str(folder / "run")
    _invoke(["train", *base, "--run-dir", run, "--no-progress"], folder.parent)
    formats = ["--format", "onnx", "--format", "tflite"]
    _invoke(["export", *base, "--run-dir", run, *formats], folder.parent)


def served(root: Path, lm_runs: LmRuns) -> Served:
    mt = once(root / "mt", _make_mt)
    lm = root / "lm"

    def make_lm(folder: Path) -> None:
        lm_corpus(folder)
        (folder / "lm.seq").write_text(LM_SPEC.format(common=COMMON.as_posix()))
        lm_runs.copy(folder / "run")
        base = [str(folder / "lm.seq"), "-e", "tiny", "--cache-dir", str(folder / "cache")]
        _invoke(["export", *base, "--run-dir", str(folder / "run")], folder.parent)

    once(lm, make_lm)
    return Served(
        [str(mt / "mt.seq"), "-e", "mt", "--cache-dir", str(mt / "cache")],
        mt / "run",
        [str(lm / "lm.seq"), "-e", "tiny", "--cache-dir", str(lm / "cache")],
        lm / "run",
    )
