"""The data loader's state is saved with each checkpoint and `--resume` goes on from it: the
checkpoint's line in `metrics.jsonl` holds each task's Grain iterator state, and a run resumed
from an earlier checkpoint draws the batches an uninterrupted run drew (its losses, bitwise)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tiny_specs import COMMON, LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.cli import app


def _records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_checkpoints_keep_the_loader_state_and_resume_from_it(tmp_path: Path) -> None:
    lm_corpus(tmp_path)
    spec = tmp_path / "lm.seq"
    spec.write_text(LM_SPEC.format(common=COMMON.as_posix()))
    run = tmp_path / "run"
    args = ["train", str(spec), "-e", "tiny", "--run-dir", str(run), "--no-progress",
            "--no-dev-eval", "--cache-dir", str(tmp_path / "cache"), "--set", "train.steps=40",
            "--set", "train.checkpoint_every=20", "--set", "train.log_every=1"]  # fmt: skip
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    records = _records(run)
    saved = {r["step"]: r["loader"] for r in records if r["split"] == "checkpoint"}
    assert saved == {20: {"lm": {"next_index": 20}}, 40: {"lm": {"next_index": 40}}}
    straight = [r["loss"] for r in records if r["split"] == "train"]

    # back to step 20, as if the run had stopped there
    shutil.rmtree(next(p for p in (run / "checkpoints").iterdir() if p.name.endswith("40")))
    kept = [r for r in records if r["step"] <= 20]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    resumed = CliRunner().invoke(app, [*args, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert "resumed from step 20" in resumed.output
    again = [r["loss"] for r in _records(run) if r["split"] == "train"]
    assert again == straight  # the same batches from step 21 on, to the bit
