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
   WER and CER on test; "no LM" is the recogniser's own best; and again (rows `NAME+unk`) with
   the LM's score of each word it does not know raised by an amount chosen on dev with the
   weights (`UNKNOWN_RAISES`);
4. with `--fusion`, shallow fusion of each LM in the CTC prefix beam search: its weights
   chosen on the first `--fusion-dev` dev utterances (`FUSION_WEIGHTS` x `FUSION_BONUSES`,
   each point a decode of them), then test decoded at them; and the two-pass system the
   fused search feeds: its n-best lists of dev and test (the same search: the 1-best is the
   fused transcript) rescored by the same LM, the second pass's weights chosen on dev as
   rescoring's are (a weight of 0 keeps the first pass's choice, so dev cannot get worse).

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
    from seqc.run.lm.nbest import read_nbest, write_nbest

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
        lists = _lists(split, found)
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


FUSION_WEIGHTS = (0.2, 0.4, 0.6, 0.8, 1.0)
FUSION_BONUSES = (0.5, 1.5, 3.0)
"""The fusion grid searched on dev. Smaller than rescoring's: each point is a beam search of
the dev utterances, not a sum over stored lists."""


def _fused_lists(
    args: argparse.Namespace, lm: object, weights: object, split: str, n: int, limit: int
) -> list:
    """The n-best lists of `split` (its first `limit` utterances, all if 0) from the CTC prefix
    beam search with `lm` fused at `weights`; each hypothesis's score includes the fusion."""
    from seqc.run.decoding.fusion import WordFusion
    from seqc.run.scoring.transcribe import nbest_ctc

    session, logits = _recogniser(args)
    tok = session.pipeline.target_tokenizer
    fusion = WordFusion(lm, tok, weights.lm_weight, weights.length_bonus)  # type: ignore[attr-defined]
    warp = _warp(args, session)
    found = nbest_ctc(logits, session.pipeline, split, args.width, n, limit, fusion, warp)
    return _lists(split, found)


def _lists(split: str, found: list) -> list:
    """`nbest_ctc`'s lists as `NBest`s (an utterance with no hypothesis gets the empty one)."""
    from seqc.run.lm.nbest import Hypothesis, NBest

    empty = (Hypothesis("", 0.0),)
    return [
        NBest(f"{split}/{i}", tuple(Hypothesis(t, s) for t, s in hyps) or empty, ref)
        for i, hyps, ref in found
    ]


def _fusion(args: argparse.Namespace, name: str, lm: object) -> dict:
    """Shallow fusion of `lm`, its weights searched on dev, and the two-pass system over its
    n-best lists: test WERs, the weights, the decode's time."""
    from seqc.run.lm.nbest import read_nbest, write_nbest
    from seqc.run.lm.rescore import Weights, grid_search, rescored
    from seqc.run.scoring.wer import error_rates

    table = []
    for a in FUSION_WEIGHTS:
        for b in FUSION_BONUSES:
            w = Weights(a, b)
            start = time.perf_counter()
            lists = _fused_lists(args, lm, w, "dev", 1, args.fusion_dev)
            rates = error_rates(
                [n.hypotheses[0].text for n in lists], [n.reference or "" for n in lists]
            )
            errors = rates["substitutions"] + rates["deletions"] + rates["insertions"]
            table.append((w, errors))
            print(
                f"{name}: fusion at {w}: dev WER {rates['wer']:.2f} over {len(lists)} "
                f"({time.perf_counter() - start:.0f} s)"
            )
    weights = min(table, key=lambda row: (row[1], row[0].lm_weight, row[0].length_bonus))[0]
    if weights.lm_weight == FUSION_WEIGHTS[-1] or weights.length_bonus == FUSION_BONUSES[-1]:
        print(f"{name}: dev chose the fusion grid's edge ({weights}): a wider grid may do better")
    out: dict = {"fusion_weights": weights}
    lists = {}
    for split in ("dev", "test"):
        at = f"{weights.lm_weight:g}-{weights.length_bonus:g}"
        path = args.nbest_dir / f"fused-{name}-{at}.{split}.nbest.jsonl"
        start = time.perf_counter()
        if path.is_file():
            lists[split] = read_nbest(path)
        else:
            lists[split] = _fused_lists(args, lm, weights, split, args.nbest, args.limit)
            path.write_text(write_nbest(lists[split]), encoding="utf-8")
        out[f"{split}_seconds"] = time.perf_counter() - start
    dev, test = lists["dev"], lists["test"]
    first = error_rates([n.hypotheses[0].text for n in test], [n.reference or "" for n in test])
    texts = sorted({h.text for n in dev + test for h in n.hypotheses})
    scored = dict(zip(texts, lm.sentences(texts), strict=True))  # type: ignore[attr-defined]
    dev_scores = [[scored[h.text] for h in n.hypotheses] for n in dev]
    second, _ = grid_search(dev, dev_scores)
    test_scores = [[scored[h.text] for h in n.hypotheses] for n in test]
    both = rescored(test, test_scores, second)
    return out | {"fused_wer": first["wer"], "two_pass_wer": both["wer"], "second": second}


UNKNOWN_RAISES = (0.0, 2.0, 4.0, 6.0, 8.0, 10.0)
"""Nats added to the LM's score of each word it does not know (its unk), searched on dev with
the rescoring weights. Why: a word LM scores an unknown word about 10 nats below a known one
(docs/results.md "LM fusion"), so rescoring prefers any known words to a correct name the LM
never saw; dev says how much of that to take back (0: none)."""


def _unknown(lm: object, scored: dict, dev: list, test: list) -> tuple[float, dict, object]:
    """Rescoring with the LM's unknown words raised by the amount dev chooses (with the
    weights): that amount, the test figures, the weights."""
    from seqc.run.lm.rescore import grid_search, rescored

    unk = lm.tokenizer.unk_id  # type: ignore[attr-defined]
    count = {t: lm.ids(t.split()).count(unk) for t in scored}  # type: ignore[attr-defined]

    def raised(lists: list, by: float) -> list[list[float]]:
        return [[scored[h.text] + by * count[h.text] for h in n.hypotheses] for n in lists]

    searched = []
    for by in UNKNOWN_RAISES:
        weights, table = grid_search(dev, raised(dev, by))
        searched.append((dict(table)[weights], by, weights))
    _, raise_, weights = min(searched, key=lambda row: (row[0], row[1]))
    row = rescored(test, raised(test, raise_), weights) | {"ms": 0.0, "raised": raise_}
    return raise_, row, weights


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
        "--fusion",
        action="store_true",
        help="also shallow fusion, its weights searched on dev, and the two-pass system "
        "(slow: tens of minutes per LM)",
    )
    parser.add_argument(
        "--fusion-lm",
        action="append",
        default=[],
        help="with --fusion, only these LMs (default: all given)",
    )
    parser.add_argument(
        "--fusion-dev", type=int, default=200, help="dev utterances the fusion grid decodes"
    )
    parser.add_argument(
        "--no-warp",
        action="store_true",
        help="decode without the recogniser's voice warp (its decode's `warp`), if it has one",
    )
    args = parser.parse_args()
    lms = dict(item.split("=", 1) for item in args.lm)
    bad = [name for name in lms if not name.isidentifier()]
    if bad:
        parser.error(f"--lm names {bad}: a name is letters, digits and _ (ce, snis_raw, ...)")
    names = [n for n in NAMES if n in lms] + [n for n in lms if n not in NAMES]
    lists = _nbest(args)
    dev, test = lists["dev"], lists["test"]
    zero = [[0.0] * len(n.hypotheses) for n in test]
    rows: dict[str, dict] = {"no_lm": rescored(test, zero, Weights(0.0, 0.0)) | {"ms": 0.0}}
    chosen: dict[str, Weights] = {}
    for name in names:
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
        raised, rows[f"{name}+unk"], chosen[f"{name}+unk"] = _unknown(lm, scored, dev, test)
        print(
            f"{name}: unknown words raised by {raised:g} nats (chosen on dev), test WER "
            f"{rows[f'{name}+unk']['wer']:.2f} against {rows[name]['wer']:.2f}"
        )
        if args.fusion and (not args.fusion_lm or name in args.fusion_lm):
            fused = _fusion(args, name, lm)
            rows[name] |= fused
            print(
                f"{name}: shallow fusion at {fused['fusion_weights']} (chosen on dev), test WER "
                f"{fused['fused_wer']:.2f} (test decoded in {fused['test_seconds']:.0f} s); "
                f"its {args.nbest}-best rescored at {fused['second']}: {fused['two_pass_wer']:.2f}"
            )
    best = oracle(test)
    print(f"\n{'LM':<18}{'WER':>8}{'CER':>8}{'LM ms/utt':>11}  weights (chosen on dev)")
    for name, r in rows.items():
        w = chosen.get(name)
        extra = f", unknown words +{r['raised']:g}" if "raised" in r else ""
        print(f"{name:<18}{r['wer']:8.2f}{r['cer']:8.2f}{r['ms']:11.2f}  {w or ''}{extra}")
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
            print(f"asr_wer_two_pass_{name}: {r['two_pass_wer']:.2f}")
    print(f"asr_wer_no_lm: {rows['no_lm']['wer']:.2f}")
    for name in names:
        key = "asr_wer_ce_lm" if name == "ce" else f"asr_wer_{name}"
        print(f"{key}: {rows[name]['wer']:.2f}")
    for name in names:
        print(f"asr_wer_{name}_unknown_raised: {rows[f'{name}+unk']['wer']:.2f}")
    if "ce" in rows:
        gain = 1 - rows["ce"]["wer"] / max(rows["no_lm"]["wer"], 1e-9)
        print(f"lm_rescoring_rel_gain: {gain:.3f}")
        for kind in ("fused", "two_pass"):
            if f"{kind}_wer" in rows["ce"]:
                gain = 1 - rows["ce"][f"{kind}_wer"] / max(rows["no_lm"]["wer"], 1e-9)
                print(f"lm_{'fusion' if kind == 'fused' else kind}_rel_gain: {gain:.3f}")
    if "ce" in rows and "snis_raw" in rows:
        print(f"snis_raw_vs_ce_wer_gap: {rows['snis_raw']['wer'] - rows['ce']['wer']:.2f}")
        speedup = rows["ce"]["ms"] / max(rows["snis_raw"]["ms"], 1e-9)
        print(f"snis_scoring_speedup: {speedup:.2f}")


if __name__ == "__main__":
    main()
