"""An encoder-decoder trains on a small generated parallel corpus, and `seqc eval` reports BLEU
and chrF of its beam-search translations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tiny_specs import TRANSLATE_SPEC, translate_pairs
from typer.testing import CliRunner

from seqc.cli import app
from seqc.run.session import open_session
from seqc.run.train.loop import train

ROOT = Path(__file__).resolve().parents[2]


def test_encoder_decoder_trains_and_scores_bleu(tmp_path: Path) -> None:
    translate_pairs(tmp_path)
    spec = tmp_path / "rev.seq"
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    spec.write_text(TRANSLATE_SPEC.format(common=common))
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
