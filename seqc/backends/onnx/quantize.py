"""int8 models from an emitted float32 one, with onnxruntime's quantization tools.

Two recipes, as onnxruntime advises:
- `quantize_dynamic`, the default for sequence models: weights stored int8, activations
  quantized per batch at run time (MatMulInteger), no calibration data. Scan bodies (LSTM,
  GRU) are quantized too, so the recurrent matrices shrink with the rest.
- `quantize_static`: QDQ format (QuantizeLinear/DequantizeLinear pairs a runtime fuses into
  int8 kernels), with activation ranges calibrated on feeds the caller gives, which should be
  real inputs (a few batches of the spec's dev set). Calibration sees only the main graph, so
  Scan bodies stay float here.

Both recipes quantize weights to 7 bits of int8's 8 (onnxruntime's `reduce_range`). Why: on an
x86 CPU without VNNI (AVX2 only, as on an AMD EPYC here), onnxruntime multiplies int8 pairs with
VPMADDUBSW, whose 16-bit sums saturate at full-range weights: the quick LM's logits were 14%
off the float model's (dynamic) and the Bible transformer's 20% (static), against 1.6% and 4.1%
with 7-bit weights. An artifact does not know which CPU will run it, so every one is made safe
for all. (Earlier sessions' machine measured 1.3% and 4.0% at full range, so it did not
saturate; 7-bit weights were not measured there.)

What is quantized: the weights of MatMul (projections, feed-forward, output logits), Gather
(embedding tables) and Conv. What is not: LayerNormalization, Softmax, the attention einsums
(activation by activation, where int8 costs accuracy for little speed), a mixture of experts'
router and its experts' einsums, and the fixed constant
tables the emitter names `const/...` that ops compute with. A constant table that is only
gathered from is stored int8 like an embedding (the sinusoid positions are no such table: the
emitter computes them from the positions).

Before quantizing, a weight reached through a Transpose (a softmax tied to the embedding table,
a conv kernel in seqc's layout) is folded into an initializer of its own, so the quantizer sees
it as a weight. A tied table's lookup then reads that transposed copy too, so the file holds
the table once in int8, a quarter of its float size rather than half (`seqc.backends.onnx.tied`:
dynamic, one per-tensor uint8 table; static, the logits' per-column int8 scales, the lookup
dequantizing only the columns it gathers).
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime import quantization as q

from seqc.backends.onnx.runtime import conform
from seqc.backends.onnx.tied import gather_columns, gather_rows

WEIGHT_OPS = ("MatMul", "Gather", "Conv")
"""Op types whose initializer inputs are quantized; everything else stays float."""
ROUTER_SUFFIX = ".router.w"
"""A mixture of experts' router (`seqc.compiler.lower.moe`) stays float, as Switch keeps it in
float32 ("selective precision"): its top-k choice is a discontinuous function of its scores,
and at int8 the example MoE LM's choices flipped enough to put its logits 17.5% (dynamic) and
18.8% (static) off the float model's, against 5% and 8% allowed."""


def quantize_dynamic(
    src_path: str | Path,
    dst_path: str | Path,
    *,
    per_channel: bool = False,
    op_types: Iterable[str] = WEIGHT_OPS,
) -> Path:
    """Weights int8, activations quantized on the fly; returns `dst_path`.

    Per-tensor weight scales by default: dynamic activations are per-tensor anyway, and it is
    onnxruntime's default and fastest path; `per_channel` gives each output column its own
    scale, which helps a trained model whose columns differ widely in range.
    """
    dst = Path(dst_path)
    with tempfile.TemporaryDirectory() as tmp:
        model, excluded, _ = _prepare(Path(src_path), Path(tmp))
        q.quantize_dynamic(
            model,
            dst,
            op_types_to_quantize=list(op_types),
            per_channel=per_channel,
            reduce_range=True,
            weight_type=q.QuantType.QInt8,
            nodes_to_exclude=excluded,
            extra_options={"EnableSubgraph": True},
        )
    return dst


def quantize_static(
    src_path: str | Path,
    dst_path: str | Path,
    calibration: Iterable[dict[str, np.ndarray]],
    *,
    per_channel: bool = True,
    op_types: Iterable[str] = WEIGHT_OPS,
    method: str = "minmax",
) -> Path:
    """QDQ int8 (weights and the activations entering quantized ops), with activation ranges
    from running the float model on `calibration` feeds; returns `dst_path`.

    Per-channel weight scales by default: QDQ carries a scale per output channel at no run-time
    cost, and both weights and activations are int8 (S8S8, onnxruntime's QDQ default).
    `method` is `minmax`, `entropy` or `percentile` (the last two hold every activation in memory).
    """
    methods = {
        "minmax": q.CalibrationMethod.MinMax,
        "entropy": q.CalibrationMethod.Entropy,
        "percentile": q.CalibrationMethod.Percentile,
    }
    if method not in methods:
        raise ValueError(f"calibration method `{method}`: use one of {sorted(methods)}")
    feeds = iter(calibration)
    first = next(feeds, None)
    if first is None:
        raise ValueError("quantize_static needs at least one calibration feed")
    dst = Path(dst_path)
    with tempfile.TemporaryDirectory() as tmp:
        model, excluded, tied = _prepare(Path(src_path), Path(tmp), static=True)
        reader = _Feeds(itertools.chain([first], feeds), onnx.load(model))
        q.quantize_static(
            model,
            dst,
            reader,
            quant_format=q.QuantFormat.QDQ,
            op_types_to_quantize=list(op_types),
            per_channel=per_channel,
            reduce_range=True,
            activation_type=q.QuantType.QInt8,
            weight_type=q.QuantType.QInt8,
            nodes_to_exclude=excluded,
            calibrate_method=methods[method],
        )
    if tied:
        quantized = onnx.load(dst)
        gather_rows(quantized, tied)
        onnx.save(quantized, dst)
    return dst


class _Feeds(q.CalibrationDataReader):
    """Hands the caller's feeds to the calibrator one at a time, cast to the model's dtypes."""

    def __init__(self, feeds: Iterable[dict[str, np.ndarray]], model: onnx.ModelProto) -> None:
        self._feeds: Iterator[dict[str, np.ndarray]] = iter(feeds)
        self._declared = {
            i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
            for i in model.graph.input
        }

    def get_next(self) -> dict[str, np.ndarray] | None:
        feed = next(self._feeds, None)
        if feed is None:
            return None
        return conform(feed, self._declared)


def _prepare(src: Path, tmp: Path, static: bool = False) -> tuple[Path, list[str], list[str]]:
    """The model with weight transposes folded and tied tables gathered from their folded copy
    (`seqc.backends.onnx.tied`), saved under `tmp`; the nodes to keep float (those computing
    with a `const/` table, and under `static` the tied gathers, which `gather_rows` then points
    at the int8 table); and the tied gathers."""
    model = onnx.load(src)
    _fold_weight_transposes(model.graph)
    tied = gather_columns(model)
    _drop_unused_initializers(model.graph)
    excluded = [
        n.name
        for n in model.graph.node
        if (n.op_type != "Gather" and any(i.startswith("const/") for i in n.input))
        or any(i.endswith(ROUTER_SUFFIX) for i in n.input)
    ]
    if static:
        excluded += tied
    out = tmp / "prepared.onnx"
    onnx.save(model, out)
    return out, excluded, tied


def _fold_weight_transposes(graph: onnx.GraphProto) -> None:
    """Replace each Transpose of an initializer by a transposed initializer (`<name>.T`). Only
    the main graph: the emitter puts no Transpose of a weight inside a scan body."""
    inits = {t.name: t for t in graph.initializer}
    folded: dict[str, str] = {}
    keep = []
    for node in graph.node:
        if node.op_type == "Transpose" and node.input[0] in inits:
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
            source = numpy_helper.to_array(inits[node.input[0]])
            suffix = ".T" if perm in (None, [1, 0]) else ".perm" + "".join(map(str, perm))
            name = node.input[0] + suffix
            if name not in inits:
                inits[name] = numpy_helper.from_array(np.transpose(source, perm), name)
                graph.initializer.append(inits[name])
            folded[node.output[0]] = name
        else:
            keep.append(node)
    if not folded:
        return
    del graph.node[:]
    graph.node.extend(keep)
    _rename_inputs(graph, folded)


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    used = _rename_inputs(graph, {})
    for t in [t for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(t)


def _rename_inputs(graph: onnx.GraphProto, names: dict[str, str]) -> set[str]:
    """Rename node inputs (in subgraphs too, which read the outer scope); returns every name
    any node reads."""
    used: set[str] = set()
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in names:
                node.input[i] = names[name]
            used.add(node.input[i])
        for attr in node.attribute:
            subs: list[Any] = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else []
            subs += list(attr.graphs)
            for sub in subs:
                used |= _rename_inputs(sub, names)
    used |= {o.name for o in graph.output}
    return used
