"""`seqc rescore`: rescore a recogniser's n-best lists with a language model and report WER.

The LM's weight and the bonus per word are chosen on dev n-best lists (`--dev`: a grid, the
pair with the fewest word errors) and then applied to the lists given, or given outright
(`--lm-weight`, `--length-bonus`). Never choose them on the split you report.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from seqc.cli.console import err, out
from seqc.cli.guard import guarded
from seqc.cli.lm_options import (
    LmExperimentOpt,
    LmOpt,
    LmRunDirOpt,
    LmScoresOpt,
    LmSpecOpt,
    lm_source,
)
from seqc.run.rundir.outputs import LineFile
from seqc.spec.errors import UsageError


@guarded
def rescore_cmd(
    nbest: Annotated[Path, typer.Argument(help="N-best lists (seqc decode --nbest N).")],
    lm: LmOpt = None,
    lm_spec: LmSpecOpt = None,
    lm_experiment: LmExperimentOpt = None,
    lm_run_dir: LmRunDirOpt = None,
    lm_scores: LmScoresOpt = None,
    dev: Annotated[
        Path | None,
        typer.Option(
            "--dev", help="Dev n-best lists to choose the weights on.", show_default=False
        ),
    ] = None,
    lm_weight: Annotated[
        float | None, typer.Option("--lm-weight", help="The LM's weight (instead of --dev).")
    ] = None,
    length_bonus: Annotated[
        float, typer.Option("--length-bonus", help="Added per word (with --lm-weight).")
    ] = 0.0,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", help="Write the rescored hypotheses, one per line.", show_default=False
        ),
    ] = None,
    json_out: Annotated[
        Path | None,
        typer.Option("--json", help="Write the figures as JSON.", show_default=False),
    ] = None,
) -> None:
    """Rescore n-best lists: total = recogniser score + lm_weight * LM score + length_bonus *
    words; print WER and CER before and after (and the oracle's, the best any rescoring could
    do)."""
    from seqc.run.lm.language_model import open_language_model
    from seqc.run.lm.nbest import read_nbest
    from seqc.run.lm.rescore import Weights, choose, grid_search, oracle, rescored

    if (dev is None) == (lm_weight is None):
        raise UsageError(
            "choose the weights on dev (--dev DEV.nbest.jsonl) or give them (--lm-weight W "
            "[--length-bonus B]), one of the two",
            code="missing-option" if dev is None else "bad-option",
        )
    source = lm_source(lm, lm_spec, lm_experiment, lm_run_dir, lm_scores)
    if source is None:
        raise UsageError(
            "name the language model: --lm ARTIFACT, or --lm-spec and --lm-experiment",
            code="missing-option",
        )
    targets = [LineFile(p) for p in (output, json_out) if p is not None]  # unwritable: now
    for t in targets:  # opened to fail early; written at the end
        t.abort()
    lists = read_nbest(nbest)
    dev_lists = read_nbest(dev) if dev is not None else []
    model = open_language_model(source)
    start = time.perf_counter()
    scores = _lm_scores(model, lists)
    dev_scores = _lm_scores(model, dev_lists)
    seconds = time.perf_counter() - start
    figures: dict[str, Any] = {"lm": model.name, "lm_scores": model.scores}
    if dev is not None:
        weights, table = grid_search(dev_lists, dev_scores)
        figures["dev"] = {"errors_by_weights": [[w.lm_weight, w.length_bonus, e] for w, e in table]}
        err.print(f"chose {weights} on {dev} ({min(e for _, e in table)} word errors)")
    else:
        weights = Weights(float(lm_weight or 0.0), length_bonus)
    figures["weights"] = {"lm_weight": weights.lm_weight, "length_bonus": weights.length_bonus}
    words = sum(h.words for n in lists + dev_lists for h in n.hypotheses)
    figures["lm_seconds"] = seconds
    figures["lm_ms_per_utterance"] = 1000 * model.seconds / max(1, len(lists) + len(dev_lists))
    figures["hypothesis_words"] = words
    if all(n.reference is not None for n in lists):
        before = rescored(lists, [[0.0] * len(n.hypotheses) for n in lists], Weights(0.0, 0.0))
        after = rescored(lists, scores, weights)
        best = oracle(lists)
        figures |= {"before": _rates(before), "after": _rates(after), "oracle": _rates(best)}
        for name in ("before", "after", "oracle"):
            r = figures[name]
            out.print(f"{name:>7}: WER {r['wer']:.2f}  CER {r['cer']:.2f}")
    else:
        err.print("the n-best lists hold no references: no error rates")
    out.print(f"LM time: {figures['lm_ms_per_utterance']:.1f} ms per utterance ({model.scores})")
    if output is not None:
        with LineFile(output) as f:
            for text in choose(lists, scores, weights):
                f.write(text)
        err.print(f"wrote {len(lists)} hypotheses to {output}")
    if json_out is not None:
        with LineFile(json_out) as f:
            f.write(json.dumps(figures))


def _lm_scores(model: Any, lists: list[Any]) -> list[list[float]]:
    """The LM's score of every hypothesis (each distinct text once)."""
    texts = sorted({h.text for n in lists for h in n.hypotheses})
    known = dict(zip(texts, model.sentences(texts), strict=True))
    return [[known[h.text] for h in n.hypotheses] for n in lists]


def _rates(r: dict[str, Any]) -> dict[str, float]:
    return {k: r[k] for k in ("wer", "cer", "words", "substitutions", "deletions", "insertions")}


COMMANDS = {"rescore": rescore_cmd}
"""This module's commands by name (`seqc.cli.app.LAZY_COMMANDS`)."""
