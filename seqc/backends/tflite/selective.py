"""Full int8 with some layers left in float: the TFLite quantizer told which ops not to touch.

Why: a linear 8-bit scale cannot hold every input. A log-mel front end's power spectrum spans
eight or more decades inside one frame, so an int8 step of max/255 rounds the quiet bins (most of
the speech) to zero, and a normalization right after the log sees ranges set by the padding's
floor; quantized, such a model's frames disagree with float on one in ten. Keeping those few
cheap layers in float (the rest of the model, every matmul and convolution of the encoder, stays
int8) is how deployed speech models run. TF's converter has that only as the experimental
`denylisted_nodes` of its MLIR quantizer, which the QuantizationDebugger uses: so the model is
converted with calibration only, the float ops of the named layers are found by their tensor
names (the TF backend names each op after its layer, `seqc.backends.tf.scopes`), and the
calibrated model is quantized with those nodes denied. The quantizer puts a dequantize before
and a quantize after each float island.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf
from tensorflow.lite.python.convert import mlir_quantize

from seqc.backends.tf.scopes import in_layers, in_signal
from seqc.backends.tflite.flatbuffer import FLOATS, ops


def layer_nodes(model: bytes, layers: Sequence[str]) -> dict[str, list[str]]:
    """The output tensor names of the ops each of `layers` computes, by layer."""
    found: dict[str, list[str]] = {layer: [] for layer in layers}
    for op in ops(model):
        for name in op.output_names:
            for layer in layers:
                if in_layers(name, [layer]):
                    found[layer].append(name)
    return found


def signal_nodes(model: bytes) -> list[str]:
    """The output tensor names of the ops computing a signal of positions alone (the sinusoid,
    `seqc.backends.tf.scopes.SIGNAL_SCOPE`): every model's int8 leaves them float, because an
    angle t * f quantized to int8 keeps nothing of the signal, and their inputs are integer
    positions, not activations with a range."""
    return [name for op in ops(model) for name in op.output_names if in_signal(name)]


def shape_nodes(model: bytes) -> list[str]:
    """The output tensor names of the float ops that read no input's values, only shapes and
    constants (`flatbuffer.Op.on_values`): the rotary angles position x frequency of a
    Conformer's attention and their sin and cos. Every model's int8 leaves them float, as it
    does the sinusoid: quantized, an angle of up to T radians is rounded to steps of T/255 (0.6
    radians for a six-second utterance's 150 frames of 40 ms), and the positions the attention
    reads are gone. They have no activation range, only the lengths calibration was fed. (Left
    to the quantizer, the robust recogniser's TFLite int8 artifact erred on 3.39% of 200 dev
    words; with its angles float, 1.29%, against the model's 0.48.)"""
    return [
        name
        for op in ops(model)
        if not op.on_values and FLOATS & set(op.outputs)
        for name in op.output_names
    ]


def quantize_except(calibrated: bytes, nodes: Sequence[str]) -> bytes:
    """The calibrated model (`_experimental_calibrate_only`) quantized to int8 as the converter
    would have, but for the ops whose outputs are `nodes`, which stay float; a float32
    interface, as `convert`'s "int8" has."""
    return mlir_quantize(
        calibrated,
        input_data_type=tf.float32,
        output_data_type=tf.float32,
        denylisted_nodes=sorted(set(nodes)),
    )
