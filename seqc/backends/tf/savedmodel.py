"""SavedModel export of a model on the TF backend, with named serving signatures.

Why: a SavedModel is what TF Serving loads and what the TFLite converter reads, so it is the
TF backend's deployment artifact. The module holds the weights once, as variables named by layer
path, and one `tf.function` per signature, traced with the spec's symbolic dims left unknown
(`None`), so one artifact serves any batch size and length:

- `serving_default` and `logits`: the forward inputs by their spec names (`ids`, or `src`,
  `src_mask`, `tgt`) to `logits` [B, T, vocab];
- `log_probs`: the same inputs to log-softmax scores, what scoring reads;
- with a `StepProgram` (`seqc.compiler.incremental`), for decoding one token at a time:
  `encode` (encoder-decoders: the encoder inputs to `enc0`, `enc1`, ...) and `step` (the
  token [B, 1], `pos`, the encoder outputs and the caches to `logits` [B, 1, vocab] and
  `next_<cache>` for each cache); a program run in one pass (a CTC model) has `encode` only,
  the forward graph itself.

Inference only: dropout off, no optimizer state. The manifest given is written beside the graph
in `assets.extra/seqc.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends.tf.context import DTYPES, Ctx
from seqc.backends.tf.ops import run_graph
from seqc.compiler.graph import Graph

FORWARD_SIGNATURES = ("serving_default", "logits", "log_probs")


class _Served(tf.Module):
    def __init__(self, params: dict[str, np.ndarray]) -> None:
        super().__init__(name="seqc")
        # A dict of variables keyed by layer path: tracked, saved, and named like the params.
        self.params = {
            name: tf.Variable(np.asarray(v, np.float32), name=name, trainable=False)
            for name, v in params.items()
        }

    def run(self, graph: Graph, inputs: dict[str, tf.Tensor]) -> list[tf.Tensor]:
        ctx = Ctx(rng=None, training=False, compute_dtype=tf.float32, portable=True)
        return run_graph(graph, self.params, inputs, ctx)


def input_specs(graph: Graph) -> dict[str, tf.TensorSpec]:
    """One spec per graph input, symbolic dims unknown, named as in the graph."""
    specs = {}
    for name, vid in graph.inputs.items():
        t = graph.ops[vid].type
        shape = [d if isinstance(d, int) else None for d in t.shape]
        specs[name] = tf.TensorSpec(shape, DTYPES[t.dtype], name=name)
    return specs


def _signature(module: _Served, graph: Graph, outputs: list[str], log_softmax: bool = False) -> Any:
    """A concrete function of positional tensors whose specs carry the input names."""
    specs = input_specs(graph)
    names = list(specs)

    def fn(*xs: tf.Tensor) -> dict[str, tf.Tensor]:
        outs = module.run(graph, dict(zip(names, xs, strict=True)))
        if log_softmax:
            outs = [tf.nn.log_softmax(outs[0], axis=-1)]
        return dict(zip(outputs, outs, strict=True))

    # No autograph: `run_graph` is plain Python over the graph's ops (its loops are explicit
    # `tf.while_loop`s), so converting each call it makes only slowed tracing, by a third.
    traced = tf.function(fn, input_signature=list(specs.values()), autograph=False)
    return traced.get_concrete_function()


def export_savedmodel(
    graph: Graph,
    params: dict[str, np.ndarray],
    out: Path,
    manifest: dict[str, Any],
    program: Any | None = None,
) -> Path:
    """Write the SavedModel to `out` (a new folder) and return it."""
    module = _Served({name: params[name] for name in graph.params})
    logits = _signature(module, graph, ["logits"])
    signatures = {
        "serving_default": logits,
        "logits": logits,
        "log_probs": _signature(module, graph, ["log_probs"], log_softmax=True),
    }
    if program is not None:
        if program.encoder is not None:
            signatures["encode"] = _signature(
                module, program.encoder, list(program.encoder_outputs)
            )
        if program.step is not None:
            signatures["step"] = _signature(module, program.step, list(program.step_outputs))
    tf.saved_model.save(module, str(out), signatures=signatures)
    extra = out / "assets.extra"
    extra.mkdir(exist_ok=True)
    inputs = {
        n: {"dtype": s.dtype.name, "shape": list(graph.ops[graph.inputs[n]].type.shape)}
        for n, s in input_specs(graph).items()
    }
    body = {**manifest, "signatures": list(signatures), "inputs": inputs}
    (extra / "seqc.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return out
