"""`seqc choose`: a run's kept checkpoints and the means of its newest 2, 3, ... scored on a
held-out split, the best taken by the rule, every figure in `RUN/chosen.json`.

One tiny JAX LM run for the module (checkpoints at steps 4, 6 and 8 kept); its criterion is dev
perplexity. The rule's arithmetic (ties, which way is better) is checked on its own with figures
given, so that it does not hang on which checkpoint a tiny run happens to score best."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_specs import checkpointed_lm
from typer.testing import CliRunner

from seqc.cli import app
from seqc.run.report import PlainReporter
from seqc.run.weights import choose
from seqc.spec.errors import UsageError

runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the spec, a JAX run directory with checkpoints at steps 4, 6 and 8)."""
    library = tmp_path_factory.getbasetemp()
    return checkpointed_lm(tmp_path_factory.mktemp("choose"), library, keep=3)


def _base(spec: Path) -> list[str]:
    return [str(spec), "-e", "tiny", "--cache-dir", str(spec.parent / "cache")]


def test_every_candidate_is_scored_and_the_best_chosen(trained: tuple[Path, Path]) -> None:
    spec, run = trained
    result = runner.invoke(app, ["choose", *_base(spec), "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    record = json.loads((run / choose.CHOSEN).read_text())
    names = [c["name"] for c in record["candidates"]]
    assert names == ["step 8", "step 6", "step 4", "mean of 2 (6-8)", "mean of 3 (4-8)"]
    assert record["criterion"] == "perplexity" and record["data"] == "dev"
    figures = [c["figures"]["perplexity"] for c in record["candidates"]]
    best = names[figures.index(min(figures))]  # the first of the lowest
    assert record["chosen"]["name"] == best
    assert f"chosen: {best}:" in result.stdout
    means = run / "averaged"
    assert sorted(p.name for p in means.iterdir()) == ["last-2-step-8", "last-3-step-8"]
    # a candidate's figure is `seqc eval`'s for the same weights
    mean3 = record["candidates"][4]
    evaluated = runner.invoke(
        app, ["eval", *_base(spec), "--run-dir", str(run), "--checkpoint", mean3["checkpoint"]]
    )
    assert evaluated.exit_code == 0, evaluated.output
    assert f"dev_perplexity: {mean3['figures']['perplexity']:.4f}" in evaluated.stdout
    # a second choice scores the means already written, and agrees
    again = runner.invoke(app, ["choose", *_base(spec), "--run-dir", str(run)])
    assert again.exit_code == 0, again.output
    assert json.loads((run / choose.CHOSEN).read_text())["chosen"] == record["chosen"]


def test_refusals_say_what_to_do(trained: tuple[Path, Path], tmp_path: Path) -> None:
    spec, run = trained
    on_test = runner.invoke(app, ["choose", *_base(spec), "--run-dir", str(run), "--split", "test"])
    assert on_test.exit_code != 0 and "choose-on-test" in on_test.output
    assert "Traceback" not in on_test.output
    missing = runner.invoke(app, ["choose", *_base(spec), "--run-dir", str(tmp_path / "none")])
    assert missing.exit_code != 0 and "no run directory" in missing.output
    # a folder where a mean would go that holds other steps' mean is named, not overwritten
    other = tmp_path / "run"
    (other / "checkpoints").mkdir(parents=True)
    for step in (6, 8):
        (other / "checkpoints" / str(step)).symlink_to((run / "checkpoints" / str(step)).resolve())
    stray = other / "averaged" / "last-2-step-8"
    stray.mkdir(parents=True)
    (stray / "averaged.json").write_text(json.dumps({"steps": [2, 8]}))
    with pytest.raises(UsageError, match="averages steps 2, 8, not 6, 8"):
        choose.candidates(other)


def test_the_rule_takes_the_best_and_a_tie_goes_to_the_earlier(tmp_path: Path) -> None:
    found = [choose.Candidate(tmp_path / str(s), (s,)) for s in (8, 6, 4)]
    wer = {8: 2.0, 6: 1.5, 4: 1.5}

    def score(c: choose.Candidate) -> dict[str, float]:
        return {"wer": wer[c.steps[0]], "loss": 1.0}

    rule = choose.criterion("asr", {"wer", "cer"})
    done = choose.choose(found, score, rule, tmp_path, {"data": "unheard"}, PlainReporter())
    assert done.chosen.steps == (6,)  # 1.5 twice: the earlier, newer one
    assert json.loads(done.record.read_text())["chosen"]["steps"] == [6]
    bleu = choose.criterion("seq2seq", {"bleu", "chrf"})
    higher = choose.choose(
        found, lambda c: {"bleu": float(c.steps[0])}, bleu, tmp_path, {}, PlainReporter()
    )
    assert higher.chosen.steps == (8,) and not bleu.lower_is_better
    assert choose.criterion("lm", {"perplexity"}).name == "headline"
