"""Scoring exports against logits exports: what self-normalised training buys at deployment.

Why: a model trained with `nce` or `snis` (variant B) is deployed by reading log p(y) as its raw
score s_y, one row of the output layer per token, instead of the logits over the whole
vocabulary (`seqc export --no-normalize`, README "Large vocabularies"). This exports one trained
checkpoint both ways as fp32 ONNX (each gated against the model as `seqc export` does) and times
the two artifacts' step functions side by side, alternating over `--rounds`: batch 1, 32
positions teacher-forced, the median of each round's repeats.

Then what n-best rescoring pays (`seqc rescore`, `bench/lm_fusion.py`): `--sentences` dev lines
of 3-12 words, scored whole by each artifact as `seqc.run.lm.language_model.LanguageModel` does
(`--batch` sentences a call, shortest first): by its sentence scorer (`sequence.onnx`, one call
a batch; the normalised LM's log-softmax inside it), and, for comparison, one step per
position (the normalised LM's log-softmax counted with its step); milliseconds per sentence,
alternating rounds. `sentence_scoring_speedup` is the sentence scorers', what rescoring runs.

Run `python bench/scoring.py --spec examples/lm/words.seq -e lm.words.snis --run-dir
runs/words/lm.words.snis` after training that run. The last lines are `name: value` pairs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> None:
    from seqc.backends import registry
    from seqc.backends.weights import match_params, read_weights
    from seqc.run.decoding.forced import teacher_forced
    from seqc.run.export.build import LATENCY_LENGTH, export_one
    from seqc.run.export.context import prepare, scoring_context
    from seqc.run.lm.language_model import SENTENCE_BATCH
    from seqc.run.session import open_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=ROOT / "examples" / "lm" / "words.seq")
    parser.add_argument("-e", "--experiment", default="lm.words.snis")
    parser.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "words" / "lm.words.snis")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=1024)
    parser.add_argument(
        "--batch", type=int, default=SENTENCE_BATCH, help="sentences per call (rescoring's)"
    )
    parser.add_argument(
        "--text", type=Path, default=ROOT / ".cache" / "data" / "english-words" / "dev.txt"
    )
    args = parser.parse_args()
    session = open_session(args.spec, args.experiment, cache_dir=ROOT / ".cache")
    weights = read_weights(args.run_dir)
    ctx = prepare(session, match_params(session.graph, weights), weights, 2, 0)
    scoring = scoring_context(ctx)
    n = LATENCY_LENGTH
    ids = np.full((1, n), 5, np.int32)
    arrays = {"inputs": ids, "targets": ids, "tgt_in": ids, "tgt_out": ids}
    with tempfile.TemporaryDirectory() as tmp:
        fns = {}
        for name, normalize in (("logits", True), ("score", False)):
            row = export_one(ctx, "onnx", "none", Path(tmp) / name, normalize, sentences=True)
            print(f"{name}: {row.size_bytes / 2**20:.1f} MiB, parity {row.parity:.1e}, "
                  f"dev {row.quality}", flush=True)  # fmt: skip
            sig = scoring.sig if name == "score" else ctx.sig
            fns[name] = (registry.artifact_format("onnx").runtime(Path(tmp) / name, sig), sig)
        times: dict[str, list[float]] = {"logits": [], "score": []}
        for r in range(args.rounds):
            for name in ("logits", "score") if r % 2 == 0 else ("score", "logits"):
                f, sig = fns[name]
                teacher_forced(f, sig, arrays)  # warm
                laps = []
                for _ in range(args.repeats):
                    t = time.perf_counter()
                    teacher_forced(f, sig, arrays)
                    laps.append(time.perf_counter() - t)
                times[name].append(1000.0 * statistics.median(laps))
                print(f"round {r + 1}: {name}: {times[name][-1]:.1f} ms", flush=True)
        texts = _phrases(args.text, args.sentences)
        per_sentence = _sentence_times(Path(tmp), texts, args.rounds, args.batch)
    vocab = session.pipeline.target_vocab_size
    logits, score = statistics.median(times["logits"]), statistics.median(times["score"])
    print(f"vocab: {vocab}")
    print(f"latency_ms_logits_b1x{n}: {logits:.1f}")
    print(f"latency_ms_score_b1x{n}: {score:.1f}")
    print(f"scoring_speedup: {logits / score:.2f}")
    med = {k: statistics.median(v) for k, v in per_sentence.items()}
    print(f"step_sentence_ms_normalized: {med['logits steps']:.2f}")
    print(f"step_sentence_ms_raw: {med['score steps']:.2f}")
    print(f"step_sentence_scoring_speedup: {med['logits steps'] / med['score steps']:.2f}")
    print(f"sentence_ms_normalized: {med['logits']:.2f}")
    print(f"sentence_ms_raw: {med['score']:.2f}")
    print(f"sentence_scoring_speedup: {med['logits'] / med['score']:.2f}")


def _phrases(path: Path, n: int) -> list[str]:
    """The first `n` lines of 3-12 words (as the read-speech corpus's phrases are) of `path`."""
    lines = (" ".join(t.split()) for t in path.read_text(encoding="utf-8").splitlines())
    return [t for t in lines if 3 <= len(t.split()) <= 12][:n]


def _sentence_times(
    folder: Path, texts: list[str], rounds: int, batch: int
) -> dict[str, list[float]]:
    """Milliseconds per sentence of each artifact's `LanguageModel.sentences`, by its sentence
    scorer (`sequence.onnx`, `logits` and `score`) and by its step (`logits steps`, `score
    steps`), alternating; each way's sentence totals must agree."""
    from seqc.run.lm.language_model import LmSource, open_language_model

    models = {}
    for k in ("logits", "score"):
        models[k] = open_language_model(LmSource(artifact=folder / k))
        assert models[k].sequence is not None, f"the {k} artifact has no sentence scorer"
        models[f"{k} steps"] = open_language_model(LmSource(artifact=folder / k))
        models[f"{k} steps"].sequence = None
    totals = {name: model.sentences(texts[:batch], batch) for name, model in models.items()}
    for k in ("logits", "score"):
        gap = max(abs(a - b) for a, b in zip(totals[k], totals[f"{k} steps"], strict=True))
        print(f"{k}: sentence scorer - steps: {gap:.1e} at most (of a sentence's log-score)")
    times: dict[str, list[float]] = {name: [] for name in models}
    for r in range(rounds):
        for name in list(models) if r % 2 == 0 else list(models)[::-1]:
            model = models[name]
            model.seconds = 0.0
            model.sentences(texts, batch)
            times[name].append(1000.0 * model.seconds / len(texts))
            print(f"round {r + 1}: {name}: {times[name][-1]:.2f} ms a sentence", flush=True)
    return times


if __name__ == "__main__":
    main()
