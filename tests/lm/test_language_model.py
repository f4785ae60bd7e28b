"""A trained LM as a scorer of word sequences (`seqc.run.lm.language_model`): its sentence
scores, its raw scores and its prefix extensions are the model's own forward pass, read at the
words asked about."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from shared_runs import LmRuns
from tiny_specs import LM_SPEC, lm_corpus

from seqc.run.lm.language_model import (
    NORMALIZED,
    RAW,
    LanguageModel,
    LmSource,
    label_log_probs,
    open_language_model,
)
from seqc.run.session import open_session
from seqc.run.weights.restore import Source, restore

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["abc abd", "cde", "efg def bcd", ""]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, lm_runs: LmRuns) -> Source:
    folder = tmp_path_factory.mktemp("lm")
    lm_corpus(folder)
    common = ROOT / "examples" / "common" / "transformer.seq"
    (folder / "lm.seq").write_text(LM_SPEC.format(common=common.as_posix()))
    return Source(
        spec=folder / "lm.seq",
        experiment="tiny",
        run_dir=lm_runs.copy(folder / "run"),
        cache_dir=folder / "cache",
    )


def _forward_logp(source: Source, texts: list[str]) -> list[np.ndarray]:
    """Each text's logits of the model's forward pass, EOS + ids in (a packed LM's lines
    follow the previous line's EOS), [T + 1, V]."""
    assert source.spec is not None and source.experiment is not None
    session = open_session(source.spec, source.experiment, cache_dir=source.cache_dir)
    assert source.run_dir is not None
    restored = restore(session, source.run_dir, "jax")
    tok = session.pipeline.tokenizer
    out = []
    for text in texts:
        ids = np.asarray([[tok.eos_id, *tok.encode(text)]], np.int32)
        arrays = {"inputs": ids, "targets": ids, "mask": np.ones(ids.shape, bool)}
        z = np.asarray(restored.model.logits(restored.state["params"], arrays), np.float64)[0]
        out.append(z)
    return out


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_sentence_scores_are_the_forward_pass_at_the_words_and_the_end(run: Source) -> None:
    lm = open_language_model(LmSource(source=run))
    assert lm.scores == NORMALIZED
    tok = lm.tokenizer
    assert lm.start == tok.eos_id  # a text LM is packed: each line followed an EOS
    for text, z, got in zip(TEXTS, _forward_logp(run, TEXTS), lm.sentences(TEXTS), strict=True):
        labels = [*tok.encode(text), tok.eos_id]
        want = _log_softmax(z)[np.arange(len(labels)), labels].sum()
        assert got == pytest.approx(want, abs=1e-4), text


def test_label_log_probs_are_the_float64_log_softmax_at_the_labels() -> None:
    """A word LM's row: 30,000 logits spread wide, each label's normalised score."""
    rng = np.random.default_rng(3)
    z = (rng.standard_normal((6, 30_000)) * 8).astype(np.float32)
    z[1, 17] = 80.0  # one word nearly certain: its log-prob near 0, the others far below
    labels = np.array([0, 17, 29_999, 5, 5, 12])
    got = label_log_probs(z, labels)
    assert got.dtype == np.float64
    want = _log_softmax(z.astype(np.float64))[np.arange(6), labels]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert -1e-6 < got[1] <= 0.0


def test_raw_scores_are_the_logits_at_the_words(run: Source) -> None:
    raw = open_language_model(LmSource(source=run, scores=RAW))
    tok = raw.tokenizer
    for text, z, got in zip(TEXTS, _forward_logp(run, TEXTS), raw.sentences(TEXTS), strict=True):
        labels = [*tok.encode(text), tok.eos_id]
        assert got == pytest.approx(z[np.arange(len(labels)), labels].sum(), abs=1e-4), text


def test_sentences_are_batched_by_length_and_returned_in_order(
    run: Source, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rescoring scores many texts at once: a batch is texts of one length (by steps, it
    steps through its longest text's positions; by the sentence scorer, it is as wide as
    its longest text), and each score comes back at its text's place, whatever the batch
    size and whichever way it is scored."""
    lm = open_language_model(LmSource(source=run))
    assert isinstance(lm, LanguageModel) and lm.sequence is not None
    texts = ["abcabcab", "a", "bcabcabc", "b", "", "cab"]
    alone = [lm.sentences([t])[0] for t in texts]
    widths: list[int] = []
    scorer = lm.sequence

    def whole(feeds: dict[str, np.ndarray]) -> np.ndarray:
        widths.append(feeds["ids"].shape[1])
        return scorer(feeds)

    lm.sequence = whole
    assert lm.sentences(texts, batch=2) == pytest.approx(alone, abs=1e-5)
    # shortest first: ("", "a"), ("b", "cab"), the two of 8 characters; one call each
    assert widths == [2, 4, 9]
    lm.sequence = None  # by steps
    steps: list[int] = []
    step = lm._step

    def counted(*args: object, **kwargs: object) -> object:
        steps.append(1)
        return step(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(lm, "_step", counted)
    assert lm.sentences(texts, batch=2) == pytest.approx(alone, abs=1e-4)
    # 2 + 4 + 9 positions, where the given order would step 9 + 9 + 4
    assert len(steps) == 2 + 4 + 9
    assert lm.sentences(texts) == pytest.approx(alone, abs=1e-4)


@pytest.mark.parametrize("scores", [NORMALIZED, RAW])
def test_the_sentence_scorer_scores_as_the_steps_do(run: Source, scores: str) -> None:
    """Whole sentences in one call (the forward, normalised in the graph, or the scoring
    graph) give what a call per position gives: both are the model's scores of the words."""
    lm = open_language_model(LmSource(source=run, scores=scores))
    assert lm.sequence is not None
    whole = lm.sentences(TEXTS)
    lm.sequence = None
    assert lm.sentences(TEXTS) == pytest.approx(whole, abs=1e-4)


def test_prefix_extensions_add_up_to_the_sentence(run: Source) -> None:
    """With characters as the "words": a prefix extended one word at a time (its caches kept)
    scores what the whole sentence does."""
    lm = open_language_model(LmSource(source=run))
    assert isinstance(lm, LanguageModel)
    words = list("abcab")
    (whole,) = lm.sentences(["".join(words)])
    total = 0.0
    for i, w in enumerate(words):
        several = lm.extend(tuple(words[:i]), [w, "d", "</s>"])  # one step, three rows
        total += several[0]
    total += lm.extend(tuple(words), ["</s>"])[0]
    assert total == pytest.approx(whole, abs=1e-4)
    # the same over token ids, as a subword LM fused at every token asks (`TokenFusion`)
    ids = [lm.ids([w])[0] for w in words]  # one token each ("words" of one character)
    by_ids = sum(lm.extend_ids(tuple(ids[:i]), [t])[0] for i, t in enumerate(ids))
    by_ids += lm.extend_ids(tuple(ids), [lm.tokenizer.eos_id])[0]
    assert by_ids == pytest.approx(whole, abs=1e-4)


def test_rescore_picks_what_the_lm_prefers_and_reports_wer(run: Source, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from seqc.cli import app
    from seqc.run.lm.nbest import Hypothesis, NBest, write_nbest
    from seqc.run.scoring.wer import error_rates

    texts = ["abc abd", "abd abc", "bcd cde", "cde bcd"]
    lm = open_language_model(LmSource(source=run))
    scores = dict(zip(texts, lm.sentences(texts), strict=True))
    lists = [
        NBest(f"u{i}", (Hypothesis(a, -1.0), Hypothesis(b, -1.2)), reference=a)
        for i, (a, b) in enumerate([texts[:2], texts[2:]])
    ]
    nbest = tmp_path / "test.nbest.jsonl"
    nbest.write_text(write_nbest(lists))
    assert run.spec is not None and run.experiment is not None and run.run_dir is not None
    lm_args = ["--lm-spec", str(run.spec), "--lm-experiment", run.experiment,
               "--lm-run-dir", str(run.run_dir)]  # fmt: skip
    out, figures = tmp_path / "best.txt", tmp_path / "figures.json"
    args = ["rescore", str(nbest), *lm_args, "--lm-weight", "10", "--output", str(out)]
    result = CliRunner().invoke(app, [*args, "--json", str(figures)])
    assert result.exit_code == 0, result.output
    preferred = [max(n.hypotheses, key=lambda h: scores[h.text]).text for n in lists]
    assert out.read_text().splitlines() == preferred
    import json

    record = json.loads(figures.read_text())
    assert record["weights"] == {"lm_weight": 10.0, "length_bonus": 0.0}
    assert record["before"]["wer"] == 0.0
    assert record["after"]["wer"] == pytest.approx(error_rates(preferred, texts[::2])["wer"])
    # weights chosen on dev (the same lists): the recogniser's own order has no errors
    result = CliRunner().invoke(app, ["rescore", str(nbest), *lm_args, "--dev", str(nbest)])
    assert result.exit_code == 0, result.output
    assert "chose lm_weight = 0" in result.output and "after: WER 0.00" in result.output
    result = CliRunner().invoke(app, ["rescore", str(nbest), *lm_args])
    assert result.exit_code == 2 and "--dev" in result.output


def test_jax_and_tf_score_alike(run: Source) -> None:
    """The same checkpoint on both backends: the scores fusion and rescoring add are the same
    numbers whichever backend reads the LM."""
    import dataclasses

    jax_lm = open_language_model(LmSource(source=run))
    tf_lm = open_language_model(LmSource(source=dataclasses.replace(run, backend="tf")))
    assert tf_lm.sentences(TEXTS) == pytest.approx(jax_lm.sentences(TEXTS), abs=1e-4)
    words = ["a", "b", "c", "</s>"]
    for history in [(), ("a",), ("a", "b", "c")]:
        assert tf_lm.extend(history, words) == pytest.approx(
            jax_lm.extend(history, words), abs=1e-4
        )


def test_a_beam_that_names_a_run_directory_fuses_its_lm(run: Source) -> None:
    """`decode = beam(lm = "RUN_DIR", ...)`: the run's frozen spec and checkpoint, opened once
    per path, its scores the LM's own."""
    from seqc.compiler.config import Beam, DecodeConfig
    from seqc.data.calls import make_call
    from seqc.run.lm.language_model import strategy_fusion

    assert run.run_dir is not None
    call = make_call("decode", "beam", width=4, lm=str(run.run_dir), lm_weight=0.5)
    beam = DecodeConfig.of(call)
    assert isinstance(beam, Beam) and beam.lm == str(run.run_dir)
    from seqc.data.tokenizers import WordTokenizer

    words = WordTokenizer.fit(["a b c d"])  # the recogniser's transcripts: words
    lm = open_language_model(LmSource(source=run))
    fusion = strategy_fusion(beam, words)
    assert fusion is not None and fusion.lm_weight == 0.5 and fusion.length_bonus == 1.0
    again = strategy_fusion(beam, words)
    assert again is not None and again.lm is fusion.lm  # opened once
    assert fusion.lm.extend(("a",), ["b", "</s>"]) == pytest.approx(
        lm.extend(("a",), ["b", "</s>"]), abs=1e-5
    )
    greedy = DecodeConfig.of(make_call("decode", "greedy"))
    assert strategy_fusion(greedy, words) is None


def test_a_hypothesis_past_the_history_is_scored_after_its_last_words(run: Source) -> None:
    from seqc.run.lm.language_model import HISTORY

    lm = open_language_model(LmSource(source=run))
    long = tuple("abcde" * 20)[: HISTORY + 5]
    assert lm.extend(long, ["a"]) == pytest.approx(lm.extend(long[-(HISTORY - 1) :], ["a"]))
