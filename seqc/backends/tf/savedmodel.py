"""SavedModel export of a model on the TF backend, with named serving signatures.

Why: a SavedModel is what TF Serving loads and what the TFLite converter reads, so it is the
TF backend's deployment artifact. The module holds the weights as variables named by layer
path and one `tf.function` per signature, traced with the spec's symbolic dims left unknown
(`None`), so one artifact serves any batch size and length:

- `serving_default` and `logits`: the forward inputs by their spec names (`ids`, or `src`,
  `src_mask`, `tgt`, `tgt_mask`) to `logits` [B, T, vocab];
- `log_probs`: the same inputs to log-softmax scores, what scoring and decoding read.

Inference only: dropout off, no optimizer state. `manifest` (experiment, task, input names
and dtypes) is written beside the graph in `assets.extra/seqc.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends.tf.interpret import run_graph
from seqc.backends.tf.ops import DTYPES, Ctx
from seqc.compiler.graph import Graph

SIGNATURES = ("serving_default", "logits", "log_probs")


class _Served(tf.Module):
    def __init__(self, graph: Graph, params: dict[str, np.ndarray]) -> None:
        super().__init__(name="seqc")
        self.graph = graph
        # A dict of variables keyed by layer path: tracked, saved, and named like the params.
        self.params = {
            name: tf.Variable(np.asarray(params[name], np.float32), name=name, trainable=False)
            for name in graph.params
        }

    def forward(self, inputs: dict[str, tf.Tensor]) -> tf.Tensor:
        ctx = Ctx(rng=None, training=False, compute_dtype=tf.float32)
        return run_graph(self.graph, self.params, inputs, ctx)[0]


def input_specs(graph: Graph) -> dict[str, tf.TensorSpec]:
    """One spec per forward input, symbolic dims unknown, named as in the spec."""
    specs = {}
    for name, vid in graph.inputs.items():
        t = graph.ops[vid].type
        shape = [d if isinstance(d, int) else None for d in t.shape]
        specs[name] = tf.TensorSpec(shape, DTYPES[t.dtype], name=name)
    return specs


def export_savedmodel(
    graph: Graph, params: dict[str, np.ndarray], out: Path, manifest: dict[str, Any]
) -> Path:
    """Write the SavedModel to `out` (a new folder) and return it."""
    module = _Served(graph, params)
    specs = input_specs(graph)
    names = list(specs)

    # Positional tensors with named specs: the signature's inputs take the specs' names.
    def logits(*xs: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"logits": module.forward(dict(zip(names, xs, strict=True)))}

    def log_probs(*xs: tf.Tensor) -> dict[str, tf.Tensor]:
        out = module.forward(dict(zip(names, xs, strict=True)))
        return {"log_probs": tf.nn.log_softmax(out, axis=-1)}

    signature = list(specs.values())
    logits_fn = tf.function(logits, input_signature=signature).get_concrete_function()
    log_probs_fn = tf.function(log_probs, input_signature=signature).get_concrete_function()
    signatures = {"serving_default": logits_fn, "logits": logits_fn, "log_probs": log_probs_fn}
    tf.saved_model.save(module, str(out), signatures=signatures)
    extra = out / "assets.extra"
    extra.mkdir(exist_ok=True)
    inputs = {n: {"dtype": s.dtype.name, "shape": _dims(graph, n)} for n, s in specs.items()}
    body = {**manifest, "signatures": list(SIGNATURES), "inputs": inputs}
    (extra / "seqc.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return out


def _dims(graph: Graph, name: str) -> list[Any]:
    return list(graph.ops[graph.inputs[name]].type.shape)


def _specs_of(graph: Graph) -> list[tf.TensorSpec]:
    out = []
    for name, vid in graph.inputs.items():
        t = graph.ops[vid].type
        shape = [d if isinstance(d, int) else None for d in t.shape]
        out.append(tf.TensorSpec(shape, DTYPES[t.dtype], name=name))
    return out


def export_step_savedmodel(
    program: Any, params: dict[str, np.ndarray], out: Path, manifest: dict[str, Any]
) -> Path:
    """A SavedModel of a `StepProgram` for incremental decoding (and TFLite conversion):

    - `encode` (encoder-decoders only): the encoder inputs to `enc0`, `enc1`, ...;
    - `step`: the token [B, 1], `pos`, the encoder outputs and the caches to `logits`
      [B, 1, vocab] and the updated caches (same names as the inputs).
    """
    module = _Served(program.step, params)
    ctx = Ctx(rng=None, training=False, compute_dtype=tf.float32)
    signatures = {}

    def make(graph: Graph, names: list[str]) -> Any:
        inputs = list(graph.inputs)

        def fn(*xs: tf.Tensor) -> dict[str, tf.Tensor]:
            outs = run_graph(graph, module.params, dict(zip(inputs, xs, strict=True)), ctx)
            return dict(zip(names, outs, strict=True))

        return tf.function(fn, input_signature=_specs_of(graph)).get_concrete_function()

    if program.encoder is not None:
        signatures["encode"] = make(program.encoder, list(program.encoder_outputs))
    signatures["step"] = make(program.step, list(program.step_outputs))
    tf.saved_model.save(module, str(out), signatures=signatures)
    extra = out / "assets.extra"
    extra.mkdir(exist_ok=True)
    body = {**manifest, "signatures": list(signatures)}
    (extra / "seqc.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return out
