"""Export benchmark: seqc's own ONNX beside tf2onnx's conversion of the same model.

Why: seqc emits ONNX directly from its op graph instead of converting a framework's graph. This
measures what that buys on one model: the Transformer LM of `lm.shakespeare.quick` (d 128, 2
layers, vocab 2000), with the weights of a trained run (`--checkpoint`) or, by default, its
seeded initialisation (node counts and latency do not depend on the values).

- seqc: `seqc.backends.onnx.emit.to_onnx` of the forward graph (and of the decoder-step graph,
  which has no tf2onnx counterpart: one token with its caches);
- tf2onnx: the TF backend's SavedModel (`logits` signature) converted by `tf2onnx` at the same
  opset.

tf2onnx cannot convert the model as written: TF's exact GELU uses `Erfc`, which tf2onnx has no
handler for (its output keeps an `Erfc` node onnxruntime cannot run). The bench reports that,
then compares both on the same model with ReLU in place of GELU (a rewrite of the op graph's
`gelu` ops, applied before either export), where the two converters' graphs are comparable.

Both are checked to compute the same logits (and the JAX model's), then run in onnxruntime on
batch 1 x 32 tokens, alternately, `--reps` times each; medians are reported. The last lines are
`name: value` pairs for tools to read. Run `python bench/export.py`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from seqc.backends.onnx.emit import check, to_onnx  # noqa: E402
from seqc.backends.onnx.runtime import OnnxRunner  # noqa: E402
from seqc.compiler.compile import compile_task  # noqa: E402
from seqc.compiler.incremental import incremental, stepping_inputs  # noqa: E402
from seqc.compiler.init import init_params  # noqa: E402
from seqc.resolve.experiment import resolve  # noqa: E402
from seqc.resolve.program import load_program  # noqa: E402

SPEC = ROOT / "examples" / "lm" / "shakespeare.seq"
EXPERIMENT = "lm.shakespeare.quick"
VOCAB = 2000
OPSET = 17


def build(checkpoint: Path | None) -> tuple[Any, dict[str, np.ndarray]]:
    program = load_program(SPEC)
    resolved = resolve(program, EXPERIMENT, symbols={"shakespeare.vocab_size": VOCAB})
    task = resolved.tasks[0]
    graph = compile_task(program, resolved, task).graph
    if checkpoint is None:
        params = {k: np.asarray(v) for k, v in init_params(graph, 1).items()}
    else:
        from seqc.backends.weights import match_params, read_weights

        params = match_params(graph, read_weights(checkpoint))
    return graph, params


def with_relu(graph: Any) -> Any:
    """The same graph with every `gelu` op computing `relu` (tf2onnx cannot convert Erfc)."""
    import copy
    import dataclasses

    out = copy.copy(graph)
    out.ops = [
        dataclasses.replace(op, kind="relu") if op.kind == "gelu" else op for op in graph.ops
    ]
    return out


def unsupported(model: Any) -> list[str]:
    """Node types outside the ONNX standard (what a converter could not map)."""
    import onnx

    known = {s.name for s in onnx.defs.get_all_schemas()}
    return sorted({n.op_type for n in model.graph.node if n.op_type not in known})


def tf2onnx_model(graph: Any, params: dict[str, np.ndarray], work: Path) -> Any:
    import tensorflow as tf
    import tf2onnx

    from seqc.backends.tf.savedmodel import export_savedmodel

    export_savedmodel(graph, params, work / "saved_model", {})
    loaded = tf.saved_model.load(str(work / "saved_model"))  # keeps the variables alive
    fn = loaded.signatures["logits"]
    spec = [tf.TensorSpec([None, None], tf.int32, name="ids")]
    model, _ = tf2onnx.convert.from_function(
        tf.function(lambda ids: fn(ids=ids), autograph=False), input_signature=spec, opset=OPSET
    )
    return model


def nodes(model: Any) -> int:
    def count(g: Any) -> int:
        total = 0
        for n in g.node:
            total += 1
            for a in n.attribute:
                if a.g is not None and a.g.node:
                    total += count(a.g)
        return total

    return count(model.graph)


def timed(run: Any, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        run()
        out.append(time.perf_counter() - t)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, default=None, help="Weights of a trained run.")
    ap.add_argument("--length", type=int, default=32)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args(argv)

    graph, params = build(args.checkpoint)
    ids = np.random.default_rng(0).integers(3, VOCAB, (1, args.length)).astype(np.int32)
    with tempfile.TemporaryDirectory() as tmp:
        missing = unsupported(tf2onnx_model(graph, params, Path(tmp) / "gelu"))
    print(f"tf2onnx on the model as written: unsupported ops {missing or 'none'}")
    if missing:
        print("comparing on the same model with ReLU in place of GELU")
        graph = with_relu(graph)
    with tempfile.TemporaryDirectory() as tmp:
        ours = check(to_onnx(graph, params, output_names=["logits"]))
        theirs = tf2onnx_model(graph, params, Path(tmp))
    program = incremental(graph, stepping_inputs(graph))
    step = check(to_onnx(program.step, params, output_names=list(program.step_outputs)))
    s_ours, s_theirs = OnnxRunner(ours), OnnxRunner(theirs)
    feeds_theirs = {s_theirs.input_names[0]: ids}
    a = s_ours.run({"ids": ids})[0]
    b = s_theirs.run(feeds_theirs)[0]
    diff = float(np.max(np.abs(a - b)))
    if diff > 1e-3:
        raise SystemExit(f"the two ONNX models disagree: max |logit diff| {diff:.3g}")

    for _ in range(3):  # warm up both
        s_ours.run({"ids": ids})
        s_theirs.run(feeds_theirs)
    t_ours, t_theirs = [], []
    for _ in range(args.reps):  # alternate, so machine noise hits both alike
        t_ours += timed(lambda: s_ours.run({"ids": ids}), 1)
        t_theirs += timed(lambda: s_theirs.run(feeds_theirs), 1)
    ms_ours = 1000 * statistics.median(t_ours)
    ms_theirs = 1000 * statistics.median(t_theirs)

    from seqc.compiler.signature import input_fields
    from seqc.compiler.step_signature import StepSignature

    s_step = OnnxRunner(step)
    feeds = {"ids": ids[:, :1], "pos": np.asarray(0, np.int32)}
    feeds |= StepSignature.of(program, input_fields(graph)).zero_caches(1, args.length)
    feeds = {k: v for k, v in feeds.items() if k in program.step.inputs}
    ms_step = 1000 * statistics.median(timed(lambda: s_step.run(feeds), args.reps))

    print(
        f"model: {EXPERIMENT}, {sum(p.size for p in params.values()):,} params, "
        f"batch 1 x {args.length}"
    )
    print(f"{'':24}{'nodes':>8}{'ms (median)':>14}")
    print(f"{'seqc ONNX (forward)':24}{nodes(ours):>8}{ms_ours:>14.2f}")
    print(f"{'tf2onnx (forward)':24}{nodes(theirs):>8}{ms_theirs:>14.2f}")
    print(f"{'seqc ONNX (one step)':24}{nodes(step):>8}{ms_step:>14.2f}")
    print(f"max |logit diff| seqc vs tf2onnx: {diff:.2e}")
    print(f"seqc_onnx_nodes: {nodes(ours)}")
    print(f"tf2onnx_nodes: {nodes(theirs)}")
    print(f"seqc_onnx_ms: {ms_ours:.3f}")
    print(f"tf2onnx_ms: {ms_theirs:.3f}")
    print(f"seqc_step_ms: {ms_step:.3f}")
    print(f"tf2onnx_over_seqc_latency: {ms_theirs / ms_ours:.3f}")
    print(f"tf2onnx_over_seqc_nodes: {nodes(theirs) / nodes(ours):.3f}")
    print(f"tf2onnx_unsupported_ops_as_written: {len(missing)}")


if __name__ == "__main__":
    main()
