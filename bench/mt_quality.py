"""The translator's quality and speed: the recipe trained from scratch (or a run given), scored on
the whole test split, and its decoding speed on the trained model and on the fp32 ONNX artifact.

What it runs, as a user would (`seqc` commands in child processes, so the figures include
nothing a user's run would not):
1. `seqc train examples/mt/bible_transformer.seq -e mt.bible.transformer.base` (skipped with
   `--run-dir RUN`), timed: `mt_train_minutes` is its wall time;
2. `seqc eval --split test` of the last checkpoint (with `--average N`: of
   `seqc average RUN --last N`; on dev the recipe's last checkpoint scored BLEU 24.86 on all
   917 verses, the average of its last three 24.69) over the whole test split (1,219 verses of
   Esther, Jonah and Acts; nothing is selected on it): `mt_test_bleu`, `mt_test_chrf`
   (sacreBLEU, its signature printed);
3. `seqc export --format onnx --quantize none`, then beam search over the first `--decode N`
   test sources twice, side by side in this process: with the trained model (its backend's
   encoder and decoder-step graphs) and with the ONNX artifact (onnxruntime), each one source
   at a time: `mt_decode_sentences_per_s` is the artifact's, and
   `mt_decode_model_sentences_per_s` the trained model's; then each in sorted batches of 16
   sources (`generate_many`, as `seqc eval` and `seqc decode --input` run them):
   `mt_decode_batched_sentences_per_s` and `mt_decode_model_batched_sentences_per_s`;
4. with `--artifacts`: the six deployed files (ONNX and TFLite; fp32, dynamic-range int8,
   static int8) exported from the same weights, each scored on the whole test split by
   `seqc eval --artifact`: `mt_test_bleu_onnx_dynamic`, ..., and their sizes;
5. the dev curve: dev BLEU against training minutes from the run's `metrics.jsonl`, drawn to
   RUN/dev_curve.png.

Run `python bench/mt_quality.py [--run-dir RUN] [--average N] [--artifacts] [--decode 100]`; the
last lines are `name: value`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

SPEC = ROOT / "examples" / "mt" / "bible_transformer.seq"
EXPERIMENT = "mt.bible.transformer.base"
SEQC = [sys.executable, "-m", "seqc.cli"]


def seqc(*args: str) -> str:
    """Run a `seqc` command; its stdout (stderr passes through to the console)."""
    done = subprocess.run([*SEQC, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"seqc {' '.join(args)} failed with exit code {done.returncode}")
    return done.stdout


def figure(text: str, name: str) -> float:
    """The value of a `name: value` line of a command's output."""
    found = re.search(rf"^{re.escape(name)}: ([0-9.]+)", text, re.MULTILINE)
    if found is None:
        sys.exit(f"no `{name}:` line in:\n{text}")
    return float(found.group(1))


def dev_curve(run: Path) -> list[tuple[float, float, int]]:
    """(minutes, dev BLEU, step) of each dev evaluation that scored translations."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open() if line.strip()]
    return [
        (float(r.get("minutes", 0.0)), float(r["bleu"]), int(r["step"]))
        for r in rows
        if r.get("split") == "dev" and "bleu" in r
    ]


def draw(curve: list[tuple[float, float, int]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot([c[0] for c in curve], [c[1] for c in curve], marker="o")
    ax.set_xlabel("training minutes (wall clock)")
    ax.set_ylabel("dev BLEU (first dev verses, beam)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def decode_speeds(weights_at: Path, artifact: Path, sentences: int) -> dict[str, float]:
    """Sentences per second of beam search with the trained model and with the artifact, on
    the same test sources, alternating blocks so load on this machine hits both alike."""
    from seqc.backends import registry
    from seqc.backends.weights import match_params, read_weights
    from seqc.run.decoding.decoders import decoder_for
    from seqc.run.decoding.text_decoder import from_artifact
    from seqc.run.export.artifact import load_artifact
    from seqc.run.scoring.translate import source_ids
    from seqc.run.session import open_session

    session = open_session(SPEC, EXPERIMENT)
    weights = read_weights(weights_at)
    model = registry.backend(weights.backend).model(session.compiled, session.train_config)
    params = model.with_params(match_params(session.graph, weights))["params"]
    tok = session.pipeline.target_tokenizer
    decoders: dict[str, Any] = {
        "model": decoder_for(model, params, tok.bos_id, tok.eos_id, tok.pad_id),
        "artifact": from_artifact(load_artifact(artifact)).decoder,
    }
    strategy = session.compiled.decode
    bound = max(b.bound for b in session.pipeline.buckets)
    examples = session.pipeline.splits["test"].examples[:sentences]
    ids = [source_ids(session.pipeline.tokenizer, ex.source or "", bound) for ex in examples]
    for dec in decoders.values():  # warm up: compilation and first-run allocation
        dec.generate(strategy, [], ids[0])
    seconds = {name: 0.0 for name in decoders}
    for dec in decoders.values():
        dec.generate_many(strategy, ids)
    batched = {name: 0.0 for name in decoders}
    same = 0
    for block in range(0, len(ids), 32):
        outs, many = {}, {}
        for name, dec in decoders.items():
            part = ids[block : block + 32]
            t = time.perf_counter()
            outs[name] = [dec.generate(strategy, [], s) for s in part]
            seconds[name] += time.perf_counter() - t
            t = time.perf_counter()
            many[name] = dec.generate_many(strategy, part)
            batched[name] += time.perf_counter() - t
        same += sum(a == b for a, b in zip(outs["model"], outs["artifact"], strict=True))
        same += sum(a == b for a, b in zip(many["model"], many["artifact"], strict=True))
    return {
        "model": len(ids) / seconds["model"],
        "artifact": len(ids) / seconds["artifact"],
        "model_batched": len(ids) / batched["model"],
        "artifact_batched": len(ids) / batched["artifact"],
        "same_output": same / (2 * len(ids)),
    }


ARTIFACTS = [(f, q) for f in ("onnx", "tflite") for q in ("none", "dynamic", "int8")]
"""The deployed translator's files: fp32, dynamic-range int8 and static (full) int8, ONNX and
TFLite, each scored on the whole test split by `seqc eval --artifact`."""


def model_bytes(artifact: Path) -> int:
    """The artifact's model files (what its export line reports), not tokenizer or spec."""
    from seqc.run.export.artifact import load_artifact, model_bytes

    return model_bytes(artifact, load_artifact(artifact).format)


def latest(run: Path) -> int:
    """The run's newest checkpoint step."""
    return max(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())


def averaged(run: Path, last: int) -> Path:
    """`seqc average RUN --last N` (the recipe's last step), reused when it exists already."""
    target = run / "averaged" / f"last-{last}-step-{latest(run)}"
    if not target.exists():
        print(seqc("average", str(run), "--last", str(last)).strip())
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, help="score this run instead of training one")
    parser.add_argument("--decode", type=int, default=100, help="test sources timed per decoder")
    parser.add_argument(
        "--average",
        type=int,
        default=0,
        help="score the average of the last N checkpoints (0, the recipe's choice on dev: the "
        "last checkpoint alone)",
    )
    parser.add_argument(
        "--artifacts", action="store_true", help="also score every ONNX and TFLite artifact"
    )
    args = parser.parse_args()
    run = args.run_dir
    minutes = float("nan")
    if run is None:
        run = ROOT / "runs" / EXPERIMENT / time.strftime("bench-%Y%m%d-%H%M%S")
        started = time.perf_counter()
        seqc("train", str(SPEC), "-e", EXPERIMENT, "--run-dir", str(run), "--no-progress")
        minutes = (time.perf_counter() - started) / 60.0
    else:
        curve = dev_curve(run)
        minutes = curve[-1][0] if curve else minutes
    weights = averaged(run, args.average) if args.average else run
    common = [str(SPEC), "-e", EXPERIMENT, "--run-dir", str(run), "--checkpoint", str(weights)]
    scored = seqc("eval", *common, "--split", "test", "--limit", "0")
    bleu, chrf = figure(scored, "test_bleu"), figure(scored, "test_chrf")
    print(f"weights: {weights}")
    print(next(line for line in scored.splitlines() if line.startswith("test_bleu")))
    # named by the weights, so a later bench of a run that trained on exports again
    export = run / f"export-bench-{weights.name if args.average else f'step-{latest(run)}'}"
    if not (export / "onnx-none").exists():
        seqc("export", *common, "--format", "onnx", "--quantize", "none", "--out", str(export))
    artifact_scores: dict[str, tuple[float, float, float]] = {}
    if args.artifacts:
        for f, q in ARTIFACTS:  # one export command each: those a run has already are kept
            if not (export / f"{f}-{q}").exists():
                seqc("export", *common, "--format", f, "--quantize", q, "--out", str(export))
        for f, q in ARTIFACTS:
            art = export / f"{f}-{q}"
            text = seqc("eval", *common[:5], "--split", "test", "--artifact", str(art))
            size = model_bytes(art)
            artifact_scores[f"{f}_{q}"] = (
                figure(text, "test_bleu"),
                figure(text, "test_chrf"),
                size / 2**20,
            )
    speeds = decode_speeds(weights, export / "onnx-none", args.decode)
    curve = dev_curve(run)
    if curve:
        draw(curve, run / "dev_curve.png", f"{EXPERIMENT}: dev BLEU")
        print(f"dev curve: {run / 'dev_curve.png'}")
        for m, b, step in curve:
            print(f"  step {step:>5}  {m:6.1f} min  dev BLEU {b:.2f}")
    print(f"decoding: same output for {speeds['same_output']:.0%} of the timed sources")
    for name, (b, c, mib) in artifact_scores.items():
        print(f"  {name:<15} test BLEU {b:6.2f}  chrF {c:6.2f}  {mib:6.2f} MiB")
    print(f"mt_test_bleu: {bleu:.2f}")
    print(f"mt_test_chrf: {chrf:.2f}")
    print(f"mt_train_minutes: {minutes:.1f}")
    print(f"mt_decode_sentences_per_s: {speeds['artifact']:.2f}")
    print(f"mt_decode_model_sentences_per_s: {speeds['model']:.2f}")
    print(f"mt_decode_batched_sentences_per_s: {speeds['artifact_batched']:.2f}")
    print(f"mt_decode_model_batched_sentences_per_s: {speeds['model_batched']:.2f}")
    for name, (b, c, mib) in artifact_scores.items():
        print(f"mt_test_bleu_{name}: {b:.2f}")
        print(f"mt_test_chrf_{name}: {c:.2f}")
        print(f"mt_size_mib_{name}: {mib:.2f}")


if __name__ == "__main__":
    main()
