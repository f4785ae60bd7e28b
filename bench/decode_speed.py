"""Decoding a trained translator: over its step graph with caches (what eval and decode use) against
the whole forward pass at every step (what they used before), on JAX and on TF.

Why: beam search over a run directory was the slow part of `seqc eval` (3.7 verses/s, against 28
for the ONNX artifact of the same checkpoint). Both decoders of each backend translate the same
test verses, in alternating blocks of five so that load on the machine hits both alike, after a
warm-up over every verse (compilation per source bucket is not timed); the outputs must agree.

Then the step decoder one source at a time against several at once (`generate_many`: sorted
batches of 16 sources, 64 rows at beam 4) over `--batched` test verses.

Run `python bench/decode_speed.py RUN [--sentences 20] [--batched 128] [--experiment EXP]`; the
last lines are `name: value` pairs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from seqc.backends import registry  # noqa: E402
from seqc.backends.weights import match_params, read_weights  # noqa: E402
from seqc.run.decoding.decoders import backend_decoder, decoder_for  # noqa: E402
from seqc.run.decoding.search import Decoder  # noqa: E402
from seqc.run.scoring.translate import source_ids  # noqa: E402
from seqc.run.session import open_session  # noqa: E402

SPEC = ROOT / "examples" / "mt" / "bible_transformer.seq"


def measure(
    session: Any, weights: Any, backend: str, ids: list[list[int]], batched_ids: list[list[int]]
) -> dict[str, float]:
    """Verses per second of the step decoder and the forward-pass decoder on `ids`, of the step
    decoder one source at a time and in batches on `batched_ids`, and their agreement."""
    model = registry.backend(backend).model(session.compiled, session.train_config)
    params = model.with_params(match_params(session.graph, weights))["params"]
    tok = session.pipeline.target_tokenizer
    special = (tok.bos_id, tok.eos_id, tok.pad_id)
    before = backend_decoder(model, params, *special) or Decoder(model, params, *special)
    decoders = {"step": decoder_for(model, params, *special), "forward": before}
    strategy = session.compiled.decode
    for dec in decoders.values():
        [dec.generate(strategy, [], s) for s in ids]
    seconds = {name: 0.0 for name in decoders}
    outs: dict[str, list[list[int]]] = {name: [] for name in decoders}
    for block in range(0, len(ids), 5):
        for name, dec in decoders.items():
            t = time.perf_counter()
            outs[name] += [dec.generate(strategy, [], s) for s in ids[block : block + 5]]
            seconds[name] += time.perf_counter() - t
    same = sum(a == b for a, b in zip(outs["step"], outs["forward"], strict=True))
    # the step decoder again, one source at a time against `generate_many` (sorted batches
    # of 16), over `batched_ids`, in alternating blocks of 32
    step = decoders["step"]
    step.generate_many(strategy, batched_ids)  # warm-up: the batched shapes compile
    alone = many = 0.0
    agree = 0
    for block in range(0, len(batched_ids), 32):
        part = batched_ids[block : block + 32]
        t = time.perf_counter()
        one = [step.generate(strategy, [], s) for s in part]
        alone += time.perf_counter() - t
        t = time.perf_counter()
        together = step.generate_many(strategy, part)
        many += time.perf_counter() - t
        agree += sum(a == b for a, b in zip(one, together, strict=True))
    return {
        "step": len(ids) / seconds["step"],
        "forward": len(ids) / seconds["forward"],
        "same": same / len(ids),
        "tokens": sum(map(len, outs["step"])) / len(ids),
        "alone": len(batched_ids) / alone,
        "batched": len(batched_ids) / many,
        "batched_same": agree / len(batched_ids),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory (or checkpoint) to decode with")
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--batched", type=int, default=128, help="verses for batched decoding")
    parser.add_argument("--experiment", default="mt.bible.transformer.base")
    args = parser.parse_args()
    session = open_session(SPEC, args.experiment)
    weights = read_weights(args.run)
    bound = max(b.bound for b in session.pipeline.buckets)
    examples = session.pipeline.splits["test"].examples[: max(args.sentences, args.batched)]
    every = [source_ids(session.pipeline.tokenizer, e.source or "", bound) for e in examples]
    ids, batched = every[: args.sentences], every[: args.batched]
    figures = {b: measure(session, weights, b, ids, batched) for b in ("jax", "tf")}
    for backend, f in figures.items():
        print(
            f"{backend}: step graph {f['step']:.2f} verses/s, forward pass {f['forward']:.2f}; "
            f"same output for {f['same']:.0%}; {f['tokens']:.1f} tokens per verse"
        )
        print(
            f"{backend}: {len(batched)} verses one at a time {f['alone']:.2f} verses/s, in "
            f"batches of 16 {f['batched']:.2f}; same output for {f['batched_same']:.0%}"
        )
    for backend, f in figures.items():
        print(f"decode_batched_{backend}_sentences_per_s: {f['batched']:.2f}")
        print(f"decode_batched_speedup_{backend}: {f['batched'] / f['alone']:.2f}")
        print(f"decode_step_{backend}_sentences_per_s: {f['step']:.2f}")
        print(f"decode_forward_{backend}_sentences_per_s: {f['forward']:.2f}")
        print(f"decode_step_speedup_{backend}: {f['step'] / f['forward']:.2f}")


if __name__ == "__main__":
    main()
