"""Whether the layers an int8 model keeps in float (`keep_float`) stayed float: no value of one
of them rounded through int8 on its way from one of its ops to another.

Why: the quantizer is told which ops to leave alone by their output names, and it does not always
listen. TF 2.21's quantizes a SPLIT whose name is denied, and an op named outside its layer is
never denied at all; either way a float island's values take an int8 round trip inside it. The
spoken-numbers recogniser's front end lost its spectrum so (a `tf.split` of the DFT's real and
imaginary parts): its TFLite int8 artifact scored test WER 9.40 where the float model scored
6.30 (docs/results.md, "Where TFLite int8 lost it"), and no check said why. So the converted
model is read back and two things are refused:

- an op of a kept layer (by its output's name, as the deny list was made) whose output is int8,
  other than the QUANTIZE that hands the island's result to an int8 consumer (it is named after
  the tensor it quantizes, and exact for what it carries there, a 0/1 mask or the last float);
- a DEQUANTIZE read by an op of a kept layer whose int8 value comes, through ops that only move
  values (`flatbuffer.MOVEMENT`), from a QUANTIZE of a kept layer's tensor: the round trip an op
  named outside the layer makes.

An island's input coming from an int8 layer before it is its edge, not a leak.
"""

from __future__ import annotations

from collections.abc import Sequence

from seqc.backends.tf.scopes import in_layers
from seqc.backends.tflite.flatbuffer import MOVEMENT, Op, ops


def leaks(model: bytes, layers: Sequence[str]) -> list[str]:
    """How values of `layers` went through int8 inside the model, one line each (empty when
    every kept layer computed in float)."""
    kept = list(layers)
    if not kept:
        return []
    everything = ops(model)
    made: dict[tuple[str, str], Op] = {}
    for op in everything:
        for name in op.output_names:
            made[(op.subgraph, name)] = op
    found = []
    for op in everything:
        if not any(in_layers(name, kept) for name in op.output_names):
            continue
        if op.name != "QUANTIZE" and "INT8" in op.outputs:
            found.append(f"{op.name} `{_short(op)}` computes in int8")
        for name in op.input_names:
            source = made.get((op.subgraph, name))
            if source is not None and source.name == "DEQUANTIZE":
                origin = _quantized_from(source, made)
                if origin is not None and in_layers(origin, kept):
                    found.append(
                        f"`{origin}` is rounded to int8 and back before `{_short(op)}` reads it"
                    )
    return sorted(set(found))


def _quantized_from(dequantize: Op, made: dict[tuple[str, str], Op]) -> str | None:
    """The float tensor whose QUANTIZE feeds `dequantize` through int8 movement ops alone, or
    None (an int8 op computed the value: an island's edge)."""
    seen: set[str] = set()
    frontier = [n for n in dequantize.input_names if n]
    while frontier:
        name = frontier.pop()
        if name in seen:
            continue
        seen.add(name)
        op = made.get((dequantize.subgraph, name))
        if op is None:
            continue  # a constant or an input of the subgraph
        if op.name == "QUANTIZE":
            return op.input_names[0] if op.input_names else None
        if op.name in MOVEMENT:
            frontier.extend(n for n in op.input_names if n)
    return None


def _short(op: Op) -> str:
    return (op.output_names[0].split(";")[0] if op.output_names else "") or "unnamed"
