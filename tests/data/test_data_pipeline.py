"""The input pipeline end to end on small generated corpora: what a training step receives."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from seqc.data.batch import LM_FIELDS, SEQ2SEQ_FIELDS
from seqc.data.calls import make_call
from seqc.data.errors import DataError
from seqc.data.pipeline import InputPipeline
from seqc.data.tokenizers import BOS_ID, EOS_ID
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "and",
    "runs",
    "far",
    "away",
    "from",
    "home",
]


def lines(n: int, lo: int, hi: int, seed: int = 0, upper: bool = False) -> list[str]:
    rng = random.Random(seed)
    out = [" ".join(rng.choices(WORDS, k=rng.randint(lo, hi))) for _ in range(n)]
    return [s.upper() for s in out] if upper else out


def text_input(tmp_path: Path, **fields: Any) -> dict[str, Any]:
    (tmp_path / "train.txt").write_text("\n".join(lines(200, 1, 12)) + "\n")
    (tmp_path / "dev.txt").write_text("\n".join(lines(20, 1, 30, seed=1)) + "\n")
    return {
        "name": "toy",
        "train": make_call("reader", "text", "train.txt"),
        "dev": make_call("reader", "text", "dev.txt"),
        "tokenizer": make_call("tokenizer", "words"),
        "buckets": {8: 4, 16: 2},
        "shuffle_buffer": 64,
        **fields,
    }


def pair_input(tmp_path: Path, **fields: Any) -> dict[str, Any]:
    src, tgt = lines(150, 1, 10, seed=2), lines(150, 1, 10, seed=3, upper=True)
    rows = [f"{s}\t{t}" for s, t in zip(src, tgt, strict=True)]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    (tmp_path / "dev.tsv").write_text("\n".join(rows[:10]) + "\n")
    return {
        "name": "pairs",
        "train": make_call("reader", "tsv", "train.tsv"),
        "dev": make_call("reader", "tsv", "dev.tsv"),
        "tokenizer": make_call("tokenizer", "words", vocab_size=1000),
        "buckets": {6: 8, 12: 4},
        **fields,
    }


def test_language_model_batches_line_per_example(tmp_path: Path) -> None:
    pipe = InputPipeline(text_input(tmp_path), base_dir=tmp_path, pack=False)
    assert pipe.task == "lm" and not pipe.packed
    assert pipe.sizes == {"train": 200, "dev": 20}
    batches = list(itertools.islice(pipe.batches("train"), pipe.steps_per_epoch()))
    seen = sorted(i for b in batches for i in b.indices)
    assert seen == list(range(pipe.splits["train"].size)) == list(range(200))
    for b in batches:
        assert tuple(b) == LM_FIELDS
        assert b["inputs"].shape == b["targets"].shape == b["mask"].shape == (b.rows, b.bucket)
        assert (b.rows, b.bucket) in {(4, 8), (2, 16)}
        assert b["inputs"].dtype == np.int32 and b["mask"].dtype == np.bool_
        for row, i in enumerate(b.indices):
            tokens = pipe.tokenizer.encode(pipe.splits["train"].examples[i].source)
            n = len(tokens) + 1
            assert b["inputs"][row, :n].tolist() == [BOS_ID, *tokens]
            assert b["targets"][row, :n].tolist() == [*tokens, EOS_ID]
            assert b["mask"][row].sum() == n
        assert not b["mask"][b.num_examples :].any()  # padding rows


def test_dev_keeps_long_examples_in_an_extra_bucket(tmp_path: Path) -> None:
    pipe = InputPipeline(text_input(tmp_path), base_dir=tmp_path, pack=False)
    dev = list(pipe.batches("dev"))
    assert sum(b.num_examples for b in dev) == 20
    assert max(b.bucket for b in dev) == 32  # the longest dev line has 30 words + bos
    assert [i for b in dev for i in b.indices] != []
    assert not pipe.drops["dev"]


def test_packed_language_model_is_one_stream(tmp_path: Path) -> None:
    pipe = InputPipeline(text_input(tmp_path), base_dir=tmp_path)
    assert pipe.packed  # a text reader packs by default
    train = pipe.splits["train"]
    stream = [BOS_ID]
    for e in train.examples:
        stream += [*pipe.tokenizer.encode(e.source), EOS_ID]
    batches = list(pipe.epoch("train", shuffle=False))
    inputs = [tok for b in batches for r in range(b.num_examples) for tok in
              b["inputs"][r][b["mask"][r]].tolist()]  # fmt: skip
    targets = [tok for b in batches for r in range(b.num_examples) for tok in
               b["targets"][r][b["mask"][r]].tolist()]  # fmt: skip
    assert inputs == stream[:-1] and targets == stream[1:]
    assert {b.bucket for b in batches} == {16}  # chunks fill the largest bucket


def test_training_drops_are_counted_and_located(tmp_path: Path) -> None:
    config = text_input(tmp_path, max_length=6)
    pipe = InputPipeline(config, base_dir=tmp_path, pack=False)
    drops = pipe.drops["train"]
    expected = sum(len(s.split()) + 1 > 6 for s in lines(200, 1, 12))
    assert drops.counts == {"longer-than-max-length": expected}
    assert "train.txt:" in drops.examples["longer-than-max-length"][0]
    assert pipe.splits["train"].size == 200 - expected
    assert "dropped" in pipe.summary()


def test_seq2seq_batches(tmp_path: Path) -> None:
    pipe = InputPipeline(pair_input(tmp_path), base_dir=tmp_path)
    assert pipe.task == "seq2seq"
    tok = pipe.tokenizer
    assert tok.encode("THE") != [tok.unk_id]  # one vocabulary trained on both sides
    for b in itertools.islice(pipe.batches("train"), pipe.steps_per_epoch()):
        assert tuple(b) == SEQ2SEQ_FIELDS
        assert {a.shape for a in b.values()} == {(b.rows, b.bucket)}
        for row, i in enumerate(b.indices):
            e = pipe.splits["train"].examples[i]
            src, tgt = tok.encode(e.source), tok.encode(e.target or "")
            assert b["src"][row, : len(src) + 1].tolist() == [*src, EOS_ID]
            assert b["src_mask"][row].sum() == len(src) + 1
            assert b["tgt_in"][row, : len(tgt) + 1].tolist() == [BOS_ID, *tgt]
            assert b["tgt_out"][row, : len(tgt) + 1].tolist() == [*tgt, EOS_ID]
            assert b["tgt_mask"][row].sum() == len(tgt) + 1
        assert b.num_tokens == int(b["tgt_mask"].sum())


def test_separate_target_tokenizer(tmp_path: Path) -> None:
    config = pair_input(tmp_path, target_tokenizer=make_call("tokenizer", "chars"))
    pipe = InputPipeline(config, base_dir=tmp_path)
    assert pipe.target_tokenizer is not pipe.tokenizer
    assert pipe.target_tokenizer.kind == "chars" and pipe.tokenizer.kind == "words"
    targets = {c for e in pipe.splits["train"].examples for c in e.target or ""}
    assert pipe.target_vocab_size == 4 + len(targets)
    assert pipe.tokenizer.encode("THE") == [pipe.tokenizer.unk_id]  # source side only


def test_same_seed_same_batches_and_resume(tmp_path: Path) -> None:
    config = text_input(tmp_path)
    a = InputPipeline(config, base_dir=tmp_path, pack=False)
    b = InputPipeline(config, base_dir=tmp_path, pack=False)
    first = [x.indices for x in itertools.islice(a.batches(), 30)]
    assert first == [x.indices for x in itertools.islice(b.batches(), 30)]
    assert first[12:] == [x.indices for x in itertools.islice(b.batches(start_step=12), 18)]


def test_splits_must_agree_on_targets(tmp_path: Path) -> None:
    config = pair_input(tmp_path, dev=make_call("reader", "tsv", "dev.tsv", target=None))
    with pytest.raises(DataError) as info:
        InputPipeline(config, base_dir=tmp_path)
    assert info.value.code == "mixed-splits"


def test_pipeline_for_a_task_of_a_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    (spec_dir / "train.txt").write_text("hello world\nHello again\n")
    (spec_dir / "toy.seq").write_text(
        'seqc 1\n\ninput toy {\n  train = text("train.txt")\n'
        "  tokenizer = chars(lowercase = true)\n  buckets = {8: 2}\n}\n\n"
        "model Tiny(vocab: int, d: int = 8) {\n  embed = Embedding(vocab, d)\n"
        "  out = Softmax(vocab, d, tie = embed)\n"
        "  forward (ids: int32[B, T]) -> float32[B, T, vocab] {\n    return out(embed(ids))\n"
        "  }\n}\n\ntask lm {\n  input = toy\n  model = Tiny(vocab = input.vocab_size)\n}\n\n"
        "experiment toy.lm {\n  tasks = [lm]\n}\n"
    )
    monkeypatch.chdir(tmp_path)  # the data is found next to the spec, not in the cwd
    experiment = resolve(load_program(spec_dir / "toy.seq"), "toy.lm")
    pipe = InputPipeline.for_task(experiment, "lm")
    assert pipe.vocab_size == 4 + len(set("hello world again"))
    assert pipe.sizes == {"train": 2}
    with pytest.raises(DataError, match="no dev split"):
        next(pipe.batches("dev"))
