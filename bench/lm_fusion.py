"""The SNIS paper's comparison in seqc: n-best rescoring of a recogniser with LMs trained by
different criteria, each read as it would be deployed.

Why: a self-normalised LM (NCE, SNIS variant B) is trained so that its raw output score s_w is
log p(w | h) without the softmax over the vocabulary; the paper's claim is that rescoring with
those raw scores is as good as with a normalised cross-entropy LM, and much cheaper (one row of
the output layer per word instead of all V). This bench measures both halves on the read-speech
task (`examples/asr/read_speech.seq`):

1. the recogniser's n-best lists of dev and test (CTC prefix beam search, batched by the
   pipeline's buckets; written to `--nbest-dir`, and read back from there when present);
2. for each LM given (`--lm NAME=ARTIFACT`, an exported ONNX/TFLite folder: `ce`, the
   cross-entropy LM's logits export, normalised; `snis_raw` and `nce_raw`, the
   scoring exports, `normalize = false`; `snis_normalized`, the SNIS LM's logits export): the
   LM's score of every distinct hypothesis, timed (`LanguageModel.seconds`: an ONNX LM's
   sentence scorer, `sequence.onnx`, a batch of hypotheses a call, the normalised LM's
   log-softmax inside it; an artifact without one, its step calls and the log-softmax);
3. the LM weight and the bonus per word chosen on dev (`seqc.run.lm.rescore.grid_search`), then
   WER and CER on test; "no LM" is the recogniser's own best;
4. with `--fusion`, shallow fusion of each LM in the CTC prefix beam search on test, at the
   weights rescoring chose (not searched again: each point is a whole decode).

A recogniser whose decode has a voice warp (`beam(..., warp = voice_warp())`) makes its n-best
lists from each voice's normalised audio, as `seqc eval` transcribes it; `--no-warp` leaves
the audio as it is (give each its own `--nbest-dir`).

Run after training and exporting the LMs with their sentence scorers (`seqc export ... --format
onnx --sentences [--no-normalize]`; the docs' "LM fusion and rescoring" has the commands):

    python bench/lm_fusion.py --asr-run-dir runs/asr.verses.ctc \\
        --lm ce=runs/lm.verses.ce/export/onnx --lm snis_raw=runs/lm.verses.snis/export/onnx-score \\
        --lm nce_raw=runs/lm.verses.nce/export/onnx-score \\
        --lm snis_normalized=runs/lm.verses.snis/export/onnx

The last lines are `name: value` pairs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NAMES = ("ce", "snis_raw", "nce_raw", "snis_normalized")


def _nbest(args: argparse.Namespace) -> dict[str, list]:
    """The dev and test n-best lists: read from --nbest-dir, or decoded and written there."""
    from seqc.run.lm.nbest import Hypothesis, NBest, read_nbest, write_nbest

    folder: Path = args.nbest_dir
    paths = {split: folder / f"{split}.nbest.jsonl" for split in ("dev", "test")}
    if all(p.is_file() for p in paths.values()):
        return {split: read_nbest(p) for split, p in paths.items()}
    from seqc.run.scoring.transcribe import nbest_ctc

    session, logits = _recogniser(args)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    warp = _warp(args, session)
    for split, path in paths.items():
        start = time.perf_counter()
        choices: dict = {}
        found = nbest_ctc(
            logits, session.pipeline, split, args.width, args.nbest, args.limit, None, warp, choices
        )
        if choices:
            factors = sorted(c.factor for c in choices.values())
            print(f"{split}: voice warp over {len(choices)} voices, factors {factors}")
        lists = [
            NBest(f"{split}/{i}", tuple(Hypothesis(t, s) for t, s in hyps), ref)
            for i, hyps, ref in found
        ]
        path.write_text(write_nbest(lists), encoding="utf-8")
        print(f"{split}: {len(lists)} n-best lists in {time.perf_counter() - start:.0f} s")
        out[split] = lists
    return out


_RECOGNISER: list = []


def _warp(args: argparse.Namespace, session: object) -> object:
    """The recogniser's voice warp (its task's `decode = beam(..., warp = ...)`), unless
    --no-warp."""
    from seqc.run.scoring.normalised import warp_of

    return None if args.no_warp else warp_of(session.compiled.decode)  # type: ignore[attr-defined]


def _recogniser(args: argparse.Namespace) -> tuple:
    """The recogniser's session and its batched CTC forward (loaded once)."""
    if not _RECOGNISER:
        from seqc.run.session import open_session
        from seqc.run.weights.restore import restore, run_backend

        session = open_session(args.asr_spec, args.asr_experiment, cache_dir=ROOT / ".cache")
        restored = restore(session, args.asr_run_dir, run_backend(session, None))
        params = restored.state["params"]
        _RECOGNISER.extend([session, lambda a: restored.model.logits(params, a)])
    return _RECOGNISER[0], _RECOGNISER[1]


def _fused(args: argparse.Namespace, lm: object, weights: object) -> dict:
    """WER and CER on test of shallow fusion with `lm` at the weights chosen for rescoring."""
    from seqc.run.decoding.fusion import WordFusion
    from seqc.run.scoring.transcribe import nbest_ctc
    from seqc.run.scoring.wer import error_rates

    session, logits = _recogniser(args)
    tok = session.pipeline.target_tokenizer
    fusion = WordFusion(lm, tok, weights.lm_weight, weights.length_bonus)  # type: ignore[attr-defined]
    start = time.perf_counter()
    warp = _warp(args, session)
    found = nbest_ctc(logits, session.pipeline, "test", args.width, 1, args.limit, fusion, warp)
    rates = error_rates([h[0][0] if h else "" for _, h, _ in found], [r for _, _, r in found])
    return rates | {"seconds": time.perf_counter() - start}


def main() -> None:
    from seqc.run.lm.language_model import LmSource, open_language_model
    from seqc.run.lm.rescore import Weights, grid_search, oracle, rescored

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asr-spec", type=Path, default=ROOT / "examples/asr/read_speech.seq")
    parser.add_argument("--asr-experiment", default="asr.verses.ctc")
    parser.add_argument("--asr-run-dir", type=Path, default=ROOT / "runs/asr.verses.ctc")
    parser.add_argument("--nbest-dir", type=Path, default=ROOT / "runs/bench-lm-fusion")
    parser.add_argument("--nbest", type=int, default=8)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--limit", type=int, default=0, help="utterances per split (0: all)")
    parser.add_argument("--lm", action="append", default=[], help="NAME=ARTIFACT_DIR")
    parser.add_argument(
        "--fusion", action="store_true", help="also shallow fusion on test (slow: minutes per LM)"
    )
    parser.add_argument(
        "--no-warp",
        action="store_true",
        help="decode without the recogniser's voice warp (its decode's `warp`), if it has one",
    )
    args = parser.parse_args()
    lms = dict(item.split("=", 1) for item in args.lm)
    unknown = set(lms) - set(NAMES)
    if unknown:
        parser.error(f"--lm names {sorted(unknown)}; expected some of {', '.join(NAMES)}")
    lists = _nbest(args)
    dev, test = lists["dev"], lists["test"]
    zero = [[0.0] * len(n.hypotheses) for n in test]
    rows: dict[str, dict] = {"no_lm": rescored(test, zero, Weights(0.0, 0.0)) | {"ms": 0.0}}
    chosen: dict[str, Weights] = {}
    for name in NAMES:
        if name not in lms:
            continue
        lm = open_language_model(LmSource(artifact=Path(lms[name])))
        texts = sorted({h.text for n in dev + test for h in n.hypotheses})
        lm.sentences(texts[:8])  # the runtime's first calls (allocation) are not timed
        lm.seconds = 0.0
        scored = dict(zip(texts, lm.sentences(texts), strict=True))
        ms = 1000 * lm.seconds / (len(dev) + len(test))
        dev_scores = [[scored[h.text] for h in n.hypotheses] for n in dev]
        test_scores = [[scored[h.text] for h in n.hypotheses] for n in test]
        chosen[name], _ = grid_search(dev, dev_scores)
        rows[name] = rescored(test, test_scores, chosen[name]) | {"ms": ms, "scores": lm.scores}
        if args.fusion:
            fused = _fused(args, lm, chosen[name])
            rows[name]["fused_wer"] = fused["wer"]
            print(f"{name}: shallow fusion, test WER {fused['wer']:.2f} ({fused['seconds']:.0f} s)")
    best = oracle(test)
    print(f"\n{'LM':<18}{'WER':>8}{'CER':>8}{'LM ms/utt':>11}  weights (chosen on dev)")
    for name, r in rows.items():
        w = chosen.get(name)
        print(f"{name:<18}{r['wer']:8.2f}{r['cer']:8.2f}{r['ms']:11.2f}  {w or ''}")
    print(f"{'oracle (n-best)':<18}{best['wer']:8.2f}{best['cer']:8.2f}")
    print(f"utterances: dev {len(dev)}, test {len(test)}; n-best {args.nbest}")
    (args.nbest_dir / "results.json").write_text(
        json.dumps(
            {k: {**v, "weights": str(chosen.get(k, ""))} for k, v in rows.items()},
            indent=2,
            default=str,
        )
    )
    for name, r in rows.items():
        if "fused_wer" in r:
            print(f"asr_wer_fused_{name}: {r['fused_wer']:.2f}")
    print(f"asr_wer_no_lm: {rows['no_lm']['wer']:.2f}")
    for name in NAMES:
        if name in rows:
            key = "asr_wer_ce_lm" if name == "ce" else f"asr_wer_{name}"
            print(f"{key}: {rows[name]['wer']:.2f}")
    if "ce" in rows:
        gain = 1 - rows["ce"]["wer"] / max(rows["no_lm"]["wer"], 1e-9)
        print(f"lm_rescoring_rel_gain: {gain:.3f}")
    if "ce" in rows and "snis_raw" in rows:
        print(f"snis_raw_vs_ce_wer_gap: {rows['snis_raw']['wer'] - rows['ce']['wer']:.2f}")
        speedup = rows["ce"]["ms"] / max(rows["snis_raw"]["ms"], 1e-9)
        print(f"snis_scoring_speedup: {speedup:.2f}")


if __name__ == "__main__":
    main()
