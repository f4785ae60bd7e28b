"""Dev BLEU during training (`train.dev_translations`) and early stopping (`train.patience`).

The rules of `Patience` on made-up figures, then a real run of the tiny reversal translator of
test_translate.py: its dev evaluations carry BLEU and chrF of a few decoded dev examples, and a
run whose dev score cannot improve (a learning rate too small to move it) stops after
`patience` evaluations with a checkpoint at the step it stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

from tiny_specs import ROOT, TRANSLATE_SPEC, translate_pairs

from seqc.run.session import open_session
from seqc.run.train.loop import train
from seqc.run.train.patience import Patience, score_of
from seqc.run.train.record import minutes_before


def test_the_score_is_bleu_else_wer_else_perplexity() -> None:
    assert score_of({"perplexity": 9.0, "bleu": 20.0}) == ("bleu", 20.0)
    assert score_of({"perplexity": 9.0, "wer": 12.0}) == ("wer", -12.0)
    assert score_of({"perplexity": 9.0}) == ("perplexity", -9.0)
    assert score_of({"perplexity": 9.0, "loss": 2.2}) == ("perplexity", -9.0)
    assert score_of({"loss": 1.0}) == ("loss", -1.0)  # a CTC model's, without WER
    assert score_of({"tokens": 8}) is None


def test_patience_counts_evaluations_without_improvement() -> None:
    p = Patience(2)
    assert not p.update(100, {"t": {"bleu": 10.0}})
    assert not p.update(200, {"t": {"bleu": 12.0}})
    assert not p.update(300, {"t": {"bleu": 11.0}})  # one stale
    assert p.update(400, {"t": {"bleu": 12.0}})  # two: a tie is no improvement
    assert p.best["t"] == (12.0, 200, "bleu")
    assert "best dev bleu 12.00 at step 200" in p.explain(400)
    lower = Patience(1)
    assert not lower.update(1, {"t": {"perplexity": 30.0}})
    assert not lower.update(2, {"t": {"perplexity": 20.0}})  # lower perplexity is better
    assert lower.update(3, {"t": {"perplexity": 25.0}})
    assert "best dev perplexity 20.00 at step 2" in lower.explain(3)
    never = Patience(0)
    assert not any(never.update(s, {"t": {"bleu": 1.0}}) for s in range(5))
    several = Patience(1)  # a run of several tasks improves when any one does
    several.update(1, {"a": {"bleu": 5.0}, "b": {"bleu": 5.0}})
    assert not several.update(2, {"a": {"bleu": 4.0}, "b": {"bleu": 6.0}})


def _spec(tmp_path: Path, train_block: str) -> Path:
    translate_pairs(tmp_path)
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    text = TRANSLATE_SPEC.format(common=common).replace(
        "train { optimizer = adam(lr = 3e-3); steps = 60; log_every = 10; eval_every = 0 }",
        train_block,
    )
    assert train_block in text
    spec = tmp_path / "rev.seq"
    spec.write_text(text)
    return spec


def test_dev_evaluations_score_translations(tmp_path: Path) -> None:
    block = (
        "train { optimizer = adam(lr = 3e-3); steps = 40; log_every = 10; eval_every = 20; "
        "dev_translations = 6 }"
    )
    session = open_session(_spec(tmp_path, block), "rev", cache_dir=tmp_path / "cache")
    result = train(session, tmp_path / "run", progress=False)
    assert result.dev_after is not None and result.dev_after["translations"] == 6
    assert 0.0 <= result.dev_after["bleu"] <= 100.0 and "chrf" in result.dev_after
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    dev = [r for r in logged if r["split"] == "dev"]
    assert [r["step"] for r in dev] == [20, 40] and all("bleu" in r for r in dev)


def test_a_run_that_stops_improving_stops_early(tmp_path: Path) -> None:
    block = (
        "train { optimizer = adam(lr = 1e-12); steps = 100; log_every = 5; eval_every = 5; "
        "checkpoint_every = 50; dev_translations = 4; patience = 2 }"
    )
    session = open_session(_spec(tmp_path, block), "rev", cache_dir=tmp_path / "cache")
    result = train(session, tmp_path / "run", progress=False)
    assert result.steps == 15  # best at 5, no better at 10 and 15
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert {"step": 15, "split": "train", "early_stop": True} in logged
    assert any(p.name.endswith("15") for p in (tmp_path / "run" / "checkpoints").iterdir())


def test_a_resumed_run_counts_its_minutes_on(tmp_path: Path) -> None:
    """The dev curve's minutes go on from the first part of a run after --resume."""
    block = "train { optimizer = adam(lr = 3e-3); steps = 10; log_every = 5; eval_every = 5 }"
    spec = _spec(tmp_path, block)
    train(open_session(spec, "rev", cache_dir=tmp_path / "cache"), tmp_path / "run", progress=False)
    metrics = tmp_path / "run" / "metrics.jsonl"
    lines = [json.loads(x) for x in metrics.open()]
    first = max(r["minutes"] for r in lines if r["split"] == "dev")
    more = open_session(spec, "rev", ["train.steps=20"], cache_dir=tmp_path / "cache")
    train(more, tmp_path / "run", progress=False, resume=True)
    dev = [json.loads(x) for x in metrics.open() if '"dev"' in x]
    assert [r["step"] for r in dev] == [5, 10, 15, 20]
    assert dev[2]["minutes"] >= first > 0
    # each checkpoint logs the minutes it was written at: a run stopped between two dev
    # evaluations resumes counting from its checkpoint, not from its last evaluation
    saved = [json.loads(x) for x in metrics.open() if '"checkpoint"' in x]
    assert [r["step"] for r in saved] == [10, 20]
    assert saved[0]["minutes"] > 0
    assert minutes_before(metrics, 12) == max(saved[0]["minutes"], first)
    # a checkpoint written after the last evaluation (SIGTERM) counts up to itself
    with metrics.open("a") as f:
        f.write(json.dumps({"step": 23, "split": "checkpoint", "minutes": 9.5}) + "\n")
    assert minutes_before(metrics, 23) == 9.5 and minutes_before(metrics, 22) < 9.5
