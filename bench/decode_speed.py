"""Decoding a trained translator: over its step graph with caches (what eval and decode use) against
the whole forward pass at every step (what they used before), on JAX and on TF.

Why: beam search over a run directory was the slow part of `seqc eval` (3.7 verses/s, against 28
for the ONNX artifact of the same checkpoint). Both decoders of each backend translate the same
test verses, in alternating blocks of five so that load on the machine hits both alike, after a
warm-up over every verse (compilation per source bucket is not timed); the outputs must agree.

Run `python bench/decode_speed.py RUN [--sentences 20] [--experiment EXP]`; the last lines are
`name: value` pairs.
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
from seqc.run.decode import Decoder, decoder_for  # noqa: E402
from seqc.run.session import open_session  # noqa: E402
from seqc.run.translate import source_ids  # noqa: E402

SPEC = ROOT / "examples" / "mt" / "bible_transformer.seq"


def measure(session: Any, weights: Any, backend: str, ids: list[list[int]]) -> dict[str, float]:
    """Verses per second of the step decoder and the forward-pass decoder, and their agreement."""
    model = registry.backend(backend).model(session.compiled, session.train_config)
    params = model.with_params(match_params(session.graph, weights))["params"]
    tok = session.pipeline.target_tokenizer
    special = (tok.bos_id, tok.eos_id, tok.pad_id)
    before = model.decoder(params, *special) or Decoder(model, params, *special)
    decoders = {"step": decoder_for(model, params, *special), "forward": before}
    strategy = session.task_config["decode"]
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
    return {
        "step": len(ids) / seconds["step"],
        "forward": len(ids) / seconds["forward"],
        "same": same / len(ids),
        "tokens": sum(map(len, outs["step"])) / len(ids),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory (or checkpoint) to decode with")
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--experiment", default="mt.bible.transformer.base")
    args = parser.parse_args()
    session = open_session(SPEC, args.experiment)
    weights = read_weights(args.run)
    bound = max(b.bound for b in session.pipeline.buckets)
    examples = session.pipeline.splits["test"].examples[: args.sentences]
    ids = [source_ids(session.pipeline.tokenizer, e.source or "", bound) for e in examples]
    figures = {backend: measure(session, weights, backend, ids) for backend in ("jax", "tf")}
    for backend, f in figures.items():
        print(
            f"{backend}: step graph {f['step']:.2f} verses/s, forward pass {f['forward']:.2f}; "
            f"same output for {f['same']:.0%}; {f['tokens']:.1f} tokens per verse"
        )
    for backend, f in figures.items():
        print(f"decode_step_{backend}_sentences_per_s: {f['step']:.2f}")
        print(f"decode_forward_{backend}_sentences_per_s: {f['forward']:.2f}")
        print(f"decode_step_speedup_{backend}: {f['step'] / f['forward']:.2f}")


if __name__ == "__main__":
    main()
