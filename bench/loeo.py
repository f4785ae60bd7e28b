"""Leave one engine out (issue 38): train the spoken-numbers recipe without one engine's voices,
then score it on that engine's voices, which it never heard.

    python bench/loeo.py [--steps 1200] [--engine flite ...] [-e EXPERIMENT --task TASK]

Why: a recogniser that has heard five hundred espeak-ng variants may still fail on a new
engine; what it does on an engine it never heard, against a model that heard it, is the nearest
this corpus comes to measuring a new speaker. Festival's voices and flite's `slt` are never in
training at all: every model here is scored on them too (the `festival` and `test` splits).

For each engine E of the training pool (espeak-ng, flite, Piper): a train manifest without E's
utterances and a dev manifest of E's alone (under `runs/bench-loeo/`, audio paths absolute),
the experiment trained on the first (`--set TASK.input.train.path=...`,
`train.steps=STEPS`, no dev evaluation during training), then `seqc eval --manifest` on E's dev
(numbers held out of training, engine unheard), on test (`slt`) and on `festival`. The
reference is the same experiment trained on every engine for the same steps (or `--reference
RUN`, a run of it already trained so), scored on each E's dev. Each training is STEPS steps at
about 1.35 s a step on this machine's 2 cores (1200 steps: 27 minutes), so the whole table at
the default is about 2 hours: run it under `nice`, in the background.

Ends with `name: value` lines per engine: `loeo_wer_unheard_E` (trained without E, on E's
dev), `loeo_wer_heard_E` (the reference on E's dev), `loeo_test_wer_without_E`,
`loeo_festival_wer_without_E`, and the reference's `loeo_test_wer_all`, `loeo_festival_wer_all`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "asr" / "spoken_numbers.seq"
CORPUS = ROOT / ".cache" / "data" / "spoken-numbers"
FOLDER = ROOT / "runs" / "bench-loeo"
ENGINES = ("espeak-ng", "flite", "piper")


def _lines(manifest: Path) -> list[dict]:
    folder = manifest.parent
    lines = [json.loads(x) for x in manifest.read_text(encoding="utf-8").splitlines() if x]
    for line in lines:  # absolute, so the manifest can live anywhere
        line["audio"] = str((folder / line["audio"]).resolve())
    return lines


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def manifests(corpus: Path, folder: Path, engine: str) -> tuple[Path, Path]:
    """(train without `engine`, dev of `engine` alone)."""
    train = [x for x in _lines(corpus / "train.jsonl") if x["engine"] != engine]
    dev = [x for x in _lines(corpus / "dev.jsonl") if x["engine"] == engine]
    if not dev:
        raise SystemExit(f"no dev utterance of {engine} in {corpus}: is the corpus recipe 3?")
    return (
        _write(folder / f"train-without-{engine}.jsonl", train),
        _write(folder / f"dev-{engine}.jsonl", dev),
    )


def _seqc(*args: str) -> str:
    command = [sys.executable, "-m", "seqc.cli", *args]
    print("$ seqc", " ".join(args), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        print(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(done.returncode)
    return done.stdout


def _sets(args: argparse.Namespace, train_manifest: Path | None) -> list[str]:
    """The overrides a run is trained and scored with: the tokenizer is fitted on the train
    split, so scoring must name the same one (seqc refuses a mismatch)."""
    if train_manifest is None:
        return []
    return ["--set", f'{args.task}.input.train.path="{train_manifest}"']


def train(run: Path, args: argparse.Namespace, train_manifest: Path | None) -> None:
    steps = args.steps
    sets = ["--set", f"train.steps={steps}", "--set", f"train.eval_every={steps}"]
    if (run / "checkpoints" / str(steps)).is_dir():
        print(f"{run} is trained to step {steps}: kept", flush=True)
        return
    _seqc(
        *("train", str(SPEC), "-e", args.experiment, "--run-dir", str(run), "--no-progress"),
        *sets,
        *_sets(args, train_manifest),
    )


def score(run: Path, args: argparse.Namespace, train_manifest: Path | None, on: Path) -> float:
    """The WER on the manifest `on` of `run` (trained on `train_manifest`)."""
    out = _seqc(
        *("eval", str(SPEC), "-e", args.experiment, "--run-dir", str(run)),
        *("--manifest", str(on), *_sets(args, train_manifest)),
    )
    return float(re.findall(r"wer: ([\d.]+)", out)[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--engine", action="append", choices=ENGINES, dest="engines")
    parser.add_argument("-e", "--experiment", default="asr.numbers.robust")
    parser.add_argument("--task", default="asr_robust", help="the experiment's speech task")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--reference", type=Path, help="a run trained on every engine")
    args = parser.parse_args()
    engines = args.engines or list(ENGINES)
    FOLDER.mkdir(parents=True, exist_ok=True)
    test, festival = args.corpus / "test.jsonl", args.corpus / "festival.jsonl"
    reference = args.reference or FOLDER / f"all-{args.steps}"
    if args.reference is None:
        train(reference, args, None)
    rows: dict[str, dict[str, float]] = {}
    for engine in engines:
        without, dev = manifests(args.corpus, FOLDER, engine)
        run = FOLDER / f"without-{engine}-{args.steps}"
        train(run, args, without)
        rows[engine] = {
            "unheard": score(run, args, without, dev),
            "heard": score(reference, args, None, dev),
            "test": score(run, args, without, test),
            "festival": score(run, args, without, festival),
        }
    ref_test = score(reference, args, None, test)
    ref_festival = score(reference, args, None, festival)
    print(f"\nleave one engine out, {args.steps} steps of {args.experiment} (WER)")
    print("| left out | its dev, unheard | its dev, heard (all engines) | test (slt) | festival |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for engine, row in rows.items():
        print(f"| {engine} | {row['unheard']:.2f} | {row['heard']:.2f} | {row['test']:.2f} "
              f"| {row['festival']:.2f} |")  # fmt: skip
    print(f"| none | | | {ref_test:.2f} | {ref_festival:.2f} |\n")
    for engine, row in rows.items():
        name = engine.replace("-", "_")
        print(f"loeo_wer_unheard_{name}: {row['unheard']:.2f}")
        print(f"loeo_wer_heard_{name}: {row['heard']:.2f}")
        print(f"loeo_test_wer_without_{name}: {row['test']:.2f}")
        print(f"loeo_festival_wer_without_{name}: {row['festival']:.2f}")
    print(f"loeo_test_wer_all: {ref_test:.2f}")
    print(f"loeo_festival_wer_all: {ref_festival:.2f}")


if __name__ == "__main__":
    main()
