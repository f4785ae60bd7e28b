"""Leave one engine out (issue 38): train the spoken-numbers recipe without one engine's voices,
then score it on that engine's voices, which it never heard.

    python bench/loeo.py [--steps 1200] [--engine flite ...] [-e EXPERIMENT --task TASK]
                         [--keep espeak-ng=0.3] [--reference RUN | --no-reference]

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

`--keep ENGINE=FRACTION` keeps a seeded FRACTION of ENGINE's training utterances (in every run,
the reference too, and the runs' names say so): how a smaller share of an engine would do,
measured on the dev voices of an engine left out, so a recipe's shares are chosen on dev, never
on `slt` or Festival. `--no-reference` trains no reference and leaves out the heard column.

Ends with `name: value` lines per engine: `loeo_wer_unheard_E` (trained without E, on E's
dev), `loeo_wer_heard_E` (the reference on E's dev), `loeo_test_wer_without_E`,
`loeo_festival_wer_without_E`, and the reference's `loeo_test_wer_all`, `loeo_festival_wer_all`.
"""

from __future__ import annotations

import argparse
import hashlib
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


def thinned(lines: list[dict], keep: dict[str, float]) -> list[dict]:
    """`lines` with only a seeded fraction `keep[E]` of engine E's utterances (the same ones
    whichever other engine is left out: each line's draw depends on its audio path alone)."""

    def kept(line: dict) -> bool:
        fraction = keep.get(line["engine"], 1.0)
        digest = hashlib.sha256(Path(line["audio"]).name.encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < fraction

    return [x for x in lines if kept(x)]


def suffix(keep: dict[str, float]) -> str:
    """What a run's and a manifest's name add for `--keep` (nothing without it)."""
    return "".join(f"-{engine}{fraction:g}" for engine, fraction in sorted(keep.items()))


def manifests(corpus: Path, folder: Path, engine: str, keep: dict[str, float]) -> tuple[Path, Path]:
    """(train without `engine`, thinned by `keep`; dev of `engine` alone)."""
    train = thinned([x for x in _lines(corpus / "train.jsonl") if x["engine"] != engine], keep)
    dev = [x for x in _lines(corpus / "dev.jsonl") if x["engine"] == engine]
    if not dev:
        raise SystemExit(f"no dev utterance of {engine} in {corpus}: is the corpus recipe 3?")
    return (
        _write(folder / f"train-without-{engine}{suffix(keep)}.jsonl", train),
        _write(folder / f"dev-{engine}.jsonl", dev),
    )


def parse_keep(items: list[str]) -> dict[str, float]:
    keep: dict[str, float] = {}
    for item in items:
        engine, _, fraction = item.partition("=")
        if engine not in ENGINES or not re.fullmatch(r"0?\.\d+|1(\.0*)?", fraction):
            raise SystemExit(f"--keep {item}: expected ENGINE=FRACTION, ENGINE one of "
                             f"{', '.join(ENGINES)} and FRACTION in (0, 1]")  # fmt: skip
        keep[engine] = float(fraction)
    return keep


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
    parser.add_argument("--no-reference", action="store_true", help="train no reference")
    parser.add_argument("--keep", action="append", default=[], metavar="ENGINE=FRACTION")
    args = parser.parse_args()
    engines = args.engines or list(ENGINES)
    keep = parse_keep(args.keep)
    FOLDER.mkdir(parents=True, exist_ok=True)
    test, festival = args.corpus / "test.jsonl", args.corpus / "festival.jsonl"
    reference, fitted = args.reference, None  # the reference run and its train manifest
    if reference is None and not args.no_reference:
        reference = FOLDER / f"all-{args.steps}{suffix(keep)}"
        if keep:
            lines = thinned(_lines(args.corpus / "train.jsonl"), keep)
            fitted = _write(FOLDER / f"train{suffix(keep)}.jsonl", lines)
        train(reference, args, fitted)
    rows: dict[str, dict[str, float]] = {}
    for engine in engines:
        without, dev = manifests(args.corpus, FOLDER, engine, keep)
        run = FOLDER / f"without-{engine}-{args.steps}{suffix(keep)}"
        train(run, args, without)
        rows[engine] = {
            "unheard": score(run, args, without, dev),
            "test": score(run, args, without, test),
            "festival": score(run, args, without, festival),
        }
        if reference is not None:
            rows[engine]["heard"] = score(reference, args, fitted, dev)
    kept = ", ".join(f"{e} kept at {f:g}" for e, f in sorted(keep.items()))
    what = f"{args.steps} steps of {args.experiment}" + (f" ({kept})" if keep else "")
    print(f"\nleave one engine out, {what} (WER)")
    print("| left out | its dev, unheard | its dev, heard (all engines) | test (slt) | festival |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for engine, row in rows.items():
        heard = f"{row['heard']:.2f}" if "heard" in row else ""
        print(f"| {engine} | {row['unheard']:.2f} | {heard} | {row['test']:.2f} "
              f"| {row['festival']:.2f} |")  # fmt: skip
    if reference is not None:
        ref_test = score(reference, args, fitted, test)
        ref_festival = score(reference, args, fitted, festival)
        print(f"| none | | | {ref_test:.2f} | {ref_festival:.2f} |")
    print()
    for engine, row in rows.items():
        name = engine.replace("-", "_")
        print(f"loeo_wer_unheard_{name}: {row['unheard']:.2f}")
        if "heard" in row:
            print(f"loeo_wer_heard_{name}: {row['heard']:.2f}")
        print(f"loeo_test_wer_without_{name}: {row['test']:.2f}")
        print(f"loeo_festival_wer_without_{name}: {row['festival']:.2f}")
    if reference is not None:
        print(f"loeo_test_wer_all: {ref_test:.2f}")
        print(f"loeo_festival_wer_all: {ref_festival:.2f}")


if __name__ == "__main__":
    main()
