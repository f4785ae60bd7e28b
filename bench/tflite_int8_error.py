"""Where TFLite int8 loses a model's accuracy: each op's output, int8 against float, on dev.

Why: `--keep-float` per layer located the robust recogniser's int8 loss in its Conformer
blocks, spread over them (docs/results.md, "Speech"), and a block is the finest layer path it
takes. This looks inside the blocks. It converts the run's SavedModel twice, as `seqc export`
does (float; int8 calibrated on the export's feeds, the `--keep-float` layers left float), runs
both with every tensor kept on `--batches` dev batches (TFLite's builtin kernels, no delegate),
and compares each int8 op's output, dequantized, with the float model's tensor of the same
name: its RMSE over the float tensor's RMS (0: exact; 1: as large as the signal). An op's error
includes what its inputs brought; a jump from an op's inputs to its output is what the op itself
loses. Also per
op kind within the encoder blocks (the median over blocks of each kind's worst jump).

    python bench/tflite_int8_error.py --run-dir runs/asr.robust4 \
        --keep-float frontend --keep-float cmvn --keep-float norm_in

Ends with `name: value` lines: output_rel_rmse (the model's output), worst_op_rel_rmse and
worst_jump (the op whose own loss is largest, and how large).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> None:
    from seqc.backends.tf.savedmodel import export_savedmodel
    from seqc.backends.tflite.convert import convert
    from seqc.backends.weights import match_params, read_weights
    from seqc.run.decoding.forced import encoder_feeds
    from seqc.run.export.context import prepare
    from seqc.run.session import open_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=ROOT / "examples/asr/spoken_numbers.seq")
    parser.add_argument("-e", "--experiment", default="asr.numbers.robust")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--checkpoint", type=Path, help="weights (default: the run's)")
    parser.add_argument("--keep-float", action="append", default=[], metavar="LAYER")
    parser.add_argument("--batches", type=int, default=4, help="dev batches compared")
    parser.add_argument("--top", type=int, default=15, help="ops listed, worst jump first")
    args = parser.parse_args()

    session = open_session(args.spec, args.experiment, cache_dir=ROOT / ".cache")
    weights = read_weights(args.checkpoint or args.run_dir)
    ctx = prepare(session, match_params(session.graph, weights), weights, args.batches, 0)
    if ctx.program.encoder is None or ctx.program.step is not None:
        sys.exit("this compares encoder-only programs (a CTC recogniser); the run's has a step")
    with tempfile.TemporaryDirectory() as tmp:
        saved = export_savedmodel(session.graph, ctx.params, Path(tmp) / "sm", {}, ctx.program)

        def representative() -> Iterator[tuple[str, dict[str, np.ndarray]]]:
            for feeds in ctx.calibration("encoder"):
                yield "encode", feeds

        models = {
            "float": convert(saved, "none", None, ["encode"]),
            "int8": convert(saved, "int8", representative, ["encode"], args.keep_float),
        }
    feeds = [encoder_feeds(ctx.sig, b) for b in ctx.batches]
    errors = compare(models, feeds)
    report(errors, models["int8"], ctx.sig.output, args.top)


SENTINEL = 1e8
"""Values this large are masks' sentinels, not signal (a CTC model's padding frames are -1e9
for every label but the blank, `seqc.compiler.lower.ctc`), which int8 cannot hold and need not."""
OUTPUT = "output:"
"""The key prefix of a signature output's error (its tensor names differ between models)."""


def _interpreter(model: bytes) -> Any:
    """A LiteRT interpreter that keeps every tensor, on the builtin kernels alone: a delegate
    (XNNPACK, the default) computes its partitions out of the interpreter's sight, and their
    tensors are not kept."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    return Interpreter(
        model_content=model,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        experimental_preserve_all_tensors=True,
    )


def _tensors(interpreter: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor of the `encode` signature after one run, by name, int8 ones dequantized,
    and its outputs as `OUTPUT` + name."""
    runner = interpreter.get_signature_runner("encode")
    out = {OUTPUT + k: np.asarray(v, np.float64) for k, v in runner(**feeds).items()}
    for d in interpreter.get_tensor_details():
        try:
            x = interpreter.get_tensor(d["index"])
        except ValueError:  # a tensor with no data (a scratch buffer)
            continue
        q = d["quantization_parameters"]
        if x.dtype in (np.int8, np.int16) and len(q["scales"]) == 1:
            x = (x.astype(np.float64) - q["zero_points"][0]) * q["scales"][0]
        if np.issubdtype(x.dtype, np.floating):
            out[d["name"]] = np.asarray(x, np.float64)
    return out


def compare(models: dict[str, bytes], feeds: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """Each tensor both models compute, by name: RMSE(int8 - float) / RMS(float), the squared
    errors and powers summed over the batches (RMS, not the standard deviation: a tensor
    that is nearly constant, a mask's, would have a tiny one), over the values below
    `SENTINEL`."""
    sq: dict[str, float] = defaultdict(float)
    power: dict[str, float] = defaultdict(float)
    interpreters = {k: _interpreter(m) for k, m in models.items()}
    for f in feeds:
        got = {k: _tensors(it, f) for k, it in interpreters.items()}
        for name, want in got["float"].items():
            have = got["int8"].get(name)
            if have is None or have.shape != want.shape or want.size < 2:
                continue
            real = np.abs(want) < SENTINEL
            if not real.any():
                continue
            sq[name] += float(np.mean((have - want)[real] ** 2))
            power[name] += float(np.mean(want[real] ** 2))
    return {n: (sq[n] / power[n]) ** 0.5 for n in sq if power[n] > 0}


def report(errors: dict[str, float], int8: bytes, output: str, top: int) -> None:
    """The ops by their own loss (output error over their inputs' worst), and per op kind."""
    from seqc.backends.tflite.flatbuffer import ops

    rows: list[tuple[float, float, str, str]] = []
    for op in ops(int8):
        named = [n for n in op.output_names if n in errors]
        if not named:
            continue
        err = max(errors[n] for n in named)
        ins = [errors[n] for n in op.input_names if n in errors]
        jump = err - max(ins, default=0.0)
        rows.append((jump, err, op.name, named[0]))
    rows.sort(reverse=True)
    print(f"{'jump':>7} {'error':>7}  op  tensor")
    for jump, err, kind, name in rows[:top]:
        print(f"{jump:7.3f} {err:7.3f}  {kind}  {name[:110]}")
    kinds: dict[tuple[str, str], float] = {}
    for jump, _, kind, name in rows:
        block = _block(name)
        if block is not None:
            key = (kind, block)
            kinds[key] = max(kinds.get(key, 0.0), jump)
    by_kind: dict[str, list[float]] = defaultdict(list)
    for (kind, _), jump in kinds.items():
        by_kind[kind].append(jump)
    print("per op kind in the encoder blocks: the median over blocks of its worst jump")
    for kind, jumps in sorted(by_kind.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"  {kind}: {statistics.median(jumps):.3f} ({len(jumps)} blocks)")
    final = errors.get(OUTPUT + output)
    if final is not None:
        print(f"output_rel_rmse: {final:.4f}")
    if rows:
        print(f"worst_op_rel_rmse: {max(r[1] for r in rows):.4f}")
        print(f"worst_jump: {rows[0][0]:.4f}")


def _block(name: str) -> str | None:
    """`encoder.2` for a tensor computed in the third encoder block, else None."""
    for part in name.split(";")[0].split("/"):
        bits = part.split(".")
        if len(bits) >= 2 and bits[0] == "encoder" and bits[1].isdigit():
            return ".".join(bits[:2])
    return None


if __name__ == "__main__":
    main()
