"""The tiny specs and corpora that many test files train on, written once.

- `LM_SPEC` with `lm_corpus`: a one-block character LM over six three-letter words. The run
  commands' tests, the multi-process groups and the exporters train it for a few steps;
  `lm_run` in `tests/conftest.py` is one run of it that a whole session shares.
- `spec_with`: that LM with another loss (the sampled criteria).
- `TRANSLATE_SPEC` with `translate_pairs`: an encoder-decoder that learns to reverse a few
  words.

The specs import the example Transformer blocks by the path given as `{common}` (`COMMON`), so a
test writes them into a temporary folder of its own.
"""

from __future__ import annotations

import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMON = ROOT / "examples" / "common" / "transformer.seq"
"""The example Transformer blocks every spec here imports."""

LM_SPEC = """seqc 1
import "{common}"
input tiny {{
  train = text("train.txt")
  dev = text("dev.txt")
  tokenizer = chars()
  buckets = {{32: 8}}
}}
model LM(vocab: int, d: int = 32, layers: int = 1, heads: int = 2) {{
  embed = Embedding(vocab, d)
  pos = SinusoidalPosition(d)
  blocks = repeat(layers) CausalBlock(d, heads, dropout = 0.1)
  norm = LayerNorm(d)
  out = Softmax(vocab, d, tie = embed)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {{
    return out(norm(blocks(pos(embed(ids)))))
  }}
}}
task lm {{
  input = tiny
  model = LM(vocab = input.vocab_size)
  decode = greedy(max_length = 8)
}}
experiment tiny {{
  tasks = [lm]
  train {{
    optimizer = adam(lr = warmup_rsqrt(peak = 1e-2, warmup = 5))
    steps = 20
    log_every = 1
    eval_every = 0
    checkpoint_every = 10
  }}
}}
"""


def lm_corpus(folder: Path) -> None:
    """`train.txt` (300 lines) and `dev.txt` (30) in `folder`: `LM_SPEC`'s input."""
    rng = random.Random(0)
    words = ["abc", "abd", "bcd", "cde", "def", "efg"]
    for split, n in (("train", 300), ("dev", 30)):
        lines = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 5))) for _ in range(n)]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")


def checkpointed_lm(folder: Path, library: Path, keep: int) -> tuple[Path, Path]:
    """(`LM_SPEC` as `folder/lm.seq`, a JAX run of it in `folder/run`): 8 steps of experiment
    `tiny`, a checkpoint every 2, the newest `keep` kept (`seqc average`'s and `seqc choose`'s
    tests). `library` is the test session's library root (`SEQC_PATH`)."""
    import pytest
    from typer.testing import CliRunner

    from seqc.cli import app
    from seqc.resolve.program import SEQC_PATH

    lm_corpus(folder)
    spec = folder / "lm.seq"
    spec.write_text(LM_SPEC.format(common=COMMON.as_posix()))
    run = folder / "run"
    args = ["train", str(spec), "-e", "tiny", "--cache-dir", str(folder / "cache")]
    args += ["--run-dir", str(run), "--no-progress", "--set", "train.steps=8"]
    args += ["--set", "train.checkpoint_every=2", "--set", f"train.keep_checkpoints={keep}"]
    with pytest.MonkeyPatch.context() as mp:  # the library root, for a module fixture
        mp.setenv(SEQC_PATH, str(library))
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return spec, run


def spec_with(folder: Path, loss: str) -> Path:
    """`LM_SPEC` with `loss` in place of its decode line, and its corpus, in `folder`."""
    lm_corpus(folder)
    common = ROOT / "examples" / "common" / "transformer.seq"
    text = LM_SPEC.format(common=common.as_posix())
    text = text.replace("  decode = greedy(max_length = 8)", f"  loss = {loss}")
    spec = folder / "lm.seq"
    spec.write_text(text)
    return spec


TRANSLATE_SPEC = """seqc 1
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


def translate_pairs(folder: Path) -> None:
    """`train.tsv` (400 pairs) and `dev.tsv` (10): `TRANSLATE_SPEC`'s input."""
    rng = random.Random(1)
    words = [f"w{i}" for i in range(12)]
    for split, n in (("train", 400), ("dev", 10)):
        rows = []
        for _ in range(n):
            src = [rng.choice(words) for _ in range(rng.randint(2, 5))]
            rows.append(" ".join(src) + "\t" + " ".join(reversed(src)))
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")


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
"""A character-level encoder-decoder that learns to reverse a word (`mt_pairs`): the exporters'
and the server's translator."""


def mt_pairs(folder: Path) -> None:
    """`train.tsv` (400 words and their reversals) and `dev.tsv` (24): `MT_SPEC`'s input."""
    rng = random.Random(0)
    for split, n in (("train", 400), ("dev", 24)):
        rows = []
        for _ in range(n):
            word = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 6)))
            rows.append(f"{word}\t{word[::-1]}")
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")


PIPELINE_LM_SPEC = """seqc 1
input tiny {
  train = text("train.txt")
  tokenizer = chars()
  buckets = {12: 8}
}
layer Block(d: int, heads: int) {
  norm1 = LayerNorm(d)
  attn = SelfAttention(d, heads, causal = true, bias = false)
  norm2 = LayerNorm(d)
  mlp = FeedForward(d, 2 * d, activation = "gelu")
  forward (x: float32[B, T, d]) -> float32[B, T, d] {
    x = x + attn(norm1(x))
    return x + mlp(norm2(x))
  }
}
model LM(vocab: int, d: int = 16, heads: int = 2) {
  embed = Embedding(vocab, d)
  pos = SinusoidalPosition(d)
  blocks = repeat(4) Block(d, heads)
  norm = LayerNorm(d)
  out = Softmax(vocab, d, tie = embed)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {
    return out(norm(blocks(pos(embed(ids)))))
  }
}
task lm {
  input = tiny
  model = LM(vocab = 20)
}
experiment tiny {
  tasks = [lm]
  train {
    steps = 20
    clip_norm = 0.5
  }
}
"""
"""The parity tests' LM (`parity_lm.SPEC`) four blocks deep, its vocabulary fixed (so `seqc check`
lowers it without data) and its batches 8 rows: what the pipeline tests cut into stages
(`tests/compiler/test_pipeline_plan.py`, `tests/processes/test_pipeline.py`)."""

MOE_LM_SPEC = """seqc 1
input tiny {
  train = text("train.txt")
  tokenizer = chars()
  buckets = {12: 8}
}
layer Block(d: int, heads: int, experts: int, top_k: int, capacity_factor: float) {
  norm1 = LayerNorm(d)
  attn = SelfAttention(d, heads, causal = true, bias = false)
  norm2 = LayerNorm(d)
  mlp = MoE(d, 2 * d, experts = experts, top_k = top_k, capacity_factor = capacity_factor)
  forward (x: float32[B, T, d]) -> float32[B, T, d] {
    x = x + attn(norm1(x))
    return x + mlp(norm2(x))
  }
}
model LM(
  vocab: int,
  d: int = 16,
  heads: int = 2,
  experts: int = 4,
  top_k: int = 2,
  capacity_factor: float = 1.0,
) {
  embed = Embedding(vocab, d)
  pos = SinusoidalPosition(d)
  blocks = repeat(2) Block(d, heads, experts, top_k, capacity_factor)
  norm = LayerNorm(d)
  out = Softmax(vocab, d, tie = embed)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {
    return out(norm(blocks(pos(embed(ids)))))
  }
}
task lm {
  input = tiny
  model = LM(vocab = 20)
}
experiment tiny {
  tasks = [lm]
  train {
    steps = 20
    clip_norm = 0.5
  }
}
"""
"""A two-block LM whose MLPs are mixtures of 4 experts, top 2, capacity factor 1 (so some
tokens are dropped in training), its vocabulary fixed so `seqc check` lowers it without data:
what the MoE tests compile, train and shard (`tests/compiler/test_moe_plan.py`,
`tests/backends/test_moe.py`, `tests/processes/test_moe_mesh.py`)."""
