"""An encoder-decoder trains on a small generated parallel corpus, and `seqc eval` reports BLEU
and chrF of its beam-search translations."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from seqc.cli import app
from seqc.run.session import open_session
from seqc.run.train import train

ROOT = Path(__file__).resolve().parents[1]

SPEC = """seqc 1
import "{common}"
input pairs {{
  train = tsv("train.tsv")
  dev = tsv("dev.tsv")
  tokenizer = words(vocab_size = 100)
  buckets = {{16: 16}}
}}
model Seq2Seq(vocab: int, d: int = 32, heads: int = 2) {{
  embed = Embedding(vocab, d)
  pos = SinusoidalPosition(d)
  encoder = EncoderBlock(d, heads, dropout = 0.0)
  decoder = DecoderBlock(d, heads, dropout = 0.0)
  norm = LayerNorm(d)
  out = Softmax(vocab, d, tie = embed)
  forward (src: int32[B, S], src_mask: bool[B, S], tgt: int32[B, T]) -> float32[B, T, vocab] {{
    memory = encoder(pos(embed(src)), mask = src_mask)
    return out(norm(decoder(pos(embed(tgt)), memory, memory_mask = src_mask)))
  }}
}}
task reverse {{
  input = pairs
  model = Seq2Seq(vocab = input.vocab_size)
  metrics = [perplexity, bleu, chrf]
  decode = beam(width = 2, max_length = 8)
}}
experiment rev {{
  tasks = [reverse]
  train {{ optimizer = adam(lr = 3e-3); steps = 60; log_every = 10; eval_every = 0 }}
}}
"""


def _pairs(folder: Path) -> None:
    rng = random.Random(1)
    words = [f"w{i}" for i in range(12)]
    for split, n in (("train", 400), ("dev", 10)):
        rows = []
        for _ in range(n):
            src = [rng.choice(words) for _ in range(rng.randint(2, 5))]
            rows.append(" ".join(src) + "\t" + " ".join(reversed(src)))
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")


def test_encoder_decoder_trains_and_scores_bleu(tmp_path: Path) -> None:
    _pairs(tmp_path)
    spec = tmp_path / "rev.seq"
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    spec.write_text(SPEC.format(common=common))
    session = open_session(spec, "rev", cache_dir=tmp_path / "cache")
    assert session.pipeline.task == "seq2seq"
    result = train(session, tmp_path / "run", progress=False, eval_before=True)
    losses = [h["loss"] for h in result.history]
    assert np.mean(losses[-2:]) < 0.6 * losses[0]
    assert result.dev_after["perplexity"] < result.dev_before["perplexity"]
    out = CliRunner().invoke(
        app,
        [
            "eval",
            str(spec),
            "-e",
            "rev",
            "--run-dir",
            str(tmp_path / "run"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--limit",
            "5",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "dev_bleu:" in out.output and "(5 examples; nrefs:1|" in out.output
    assert "dev_chrf:" in out.output
