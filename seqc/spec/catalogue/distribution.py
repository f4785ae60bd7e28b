"""Built-in kinds for where a model runs and how it is shipped.

Namespaces:
- "device": one accelerator or host, described by the numbers a placer needs (memory, compute
  speed, bandwidths). A distribution block lists them, e.g. `4 x gpu(memory = "16GiB")`.
- "placement": the algorithm that assigns the model's layers to those devices. The m_* kinds
  are the memory-constrained placers of Baechi (Jeon et al., SoCC 2020): they take the device
  numbers above and the layer graph's costs, so a spec can be placed without any device.
- "export": serving formats written after training.

Why device numbers are params rather than detected: placement runs at compile time, possibly on
a machine without the target devices, so the spec states what it targets. The defaults are
round figures for a common part of each class; state real numbers for real placement.
Sizes are written "16GiB" or "900GB"; bandwidths are sizes per second. Memory, speed and
bandwidths are > 0 (a placer divides by them); latency is >= 0.
"""

from __future__ import annotations

from typing import Final

from seqc.spec.kinds import REGISTRY, declare, param
from seqc.spec.types import (
    BOOL,
    FLOAT,
    INT,
    NON_NEGATIVE,
    POSITIVE,
    SIZE,
    STR,
    Type,
    between,
    list_of,
    map_of,
    one_of,
)

REGISTRY.docs.update(
    {
        "device": "Devices a distribution block spreads a model over.",
        "placement": "Algorithms that assign layers to devices, for a distribution block.",
        "export": "Serving formats for the formats list of an export block.",
        "pipeline": "Pipeline schedules over a mesh's stage axis, for a distribution block.",
        "stages": "How a pipeline's stages are chosen, for a distribution block.",
    }
)

QUANTIZE_MODES: Final[tuple[str, ...]] = ("none", "dynamic", "int8", "fp16")
"""Post-training quantisation: none; dynamic-range int8 weights; full int8; float16 weights."""

AMOUNT: Final[Type] = SIZE.within(POSITIVE)
"""Bytes, or bytes per second: more than none."""
FLOPS: Final[Type] = FLOAT.within(POSITIVE)
LATENCY: Final[Type] = FLOAT.within(NON_NEGATIVE)
DEVICE_INDEX: Final[Type] = INT.within(NON_NEGATIVE)

_MEMORY_DOC = "Memory available to the model on one device."
_FLOPS_DOC = "Peak arithmetic throughput in floating-point operations per second."
_BANDWIDTH_DOC = 'Memory bandwidth per second, written as a size (e.g. "900GB").'
_LINK_DOC = 'Bandwidth per second to each other device, written as a size (e.g. "25GB").'
_LATENCY_DOC = "Seconds each transfer to another device takes besides its bytes (`seqc calibrate`)."

# --- devices -----------------------------------------------------------------------------------

declare(
    "device",
    "cpu",
    "A host CPU (all its cores count as one device).",
    param("memory", AMOUNT, "8GiB", _MEMORY_DOC),
    param("flops", FLOPS, 1e11, _FLOPS_DOC),
    param("bandwidth", AMOUNT, "20GB", _BANDWIDTH_DOC),
    param("link", AMOUNT, "10GB", _LINK_DOC),
    param("latency", LATENCY, 2e-5, _LATENCY_DOC),
    positional=(),
)

declare(
    "device",
    "gpu",
    "One GPU (a MIG slice counts as one GPU with its own memory).",
    param("memory", AMOUNT, "16GiB", _MEMORY_DOC),
    param("flops", FLOPS, 1.5e13, _FLOPS_DOC),
    param("bandwidth", AMOUNT, "900GB", _BANDWIDTH_DOC),
    param("link", AMOUNT, "16GB", _LINK_DOC),
    param("latency", LATENCY, 1.34e-4, _LATENCY_DOC),
    positional=(),
)

declare(
    "device",
    "tpu",
    "One TPU core (or chip, if the backend exposes chips).",
    param("memory", AMOUNT, "16GiB", _MEMORY_DOC),
    param("flops", FLOPS, 1.2e14, _FLOPS_DOC),
    param("bandwidth", AMOUNT, "600GB", _BANDWIDTH_DOC),
    param("link", AMOUNT, "100GB", _LINK_DOC),
    param("latency", LATENCY, 5e-5, _LATENCY_DOC),
    positional=(),
)

# --- placement ---------------------------------------------------------------------------------

declare(
    "placement",
    "single",
    "Puts the whole model on one device; other devices only replicate it along the data axis.",
    param(
        "device", DEVICE_INDEX, 0, "Index of the device in the distribution block's device list."
    ),
    positional=("device",),
)

declare(
    "placement",
    "manual",
    "Places each layer on the device its path is mapped to, e.g. "
    "manual(layers = {encoder: 0, decoder: 1}); a path covers the layers under it, the longest "
    "match wins, and unlisted layers go to device 0.",
    param("layers", map_of(STR, DEVICE_INDEX), {}, "Layer path (or prefix) -> device index."),
    positional=("layers",),
)

declare(
    "placement",
    "m_topo",
    "Baechi m-TOPO: walks the layer graph in topological order and fills each device up to an "
    "equal share of the total memory before moving to the next.",
)

declare(
    "placement",
    "m_etf",
    "Baechi m-ETF: list scheduling that puts each ready layer on the device where it can start "
    "earliest (communication included) while memory allows.",
)

declare(
    "placement",
    "m_sct",
    "Baechi m-SCT: m-ETF that keeps a layer with its favourite child when a linear-programming "
    "relaxation says they belong together, for graphs with small communication times.",
    param(
        "threshold",
        FLOAT,
        0.5,
        "LP value above which a parent-child edge is kept on one device, in (0, 1).",
        range=between(0, 1, low_open=True, high_open=True),
    ),
    positional=(),
)

# --- pipelines ---------------------------------------------------------------------------------

declare(
    "pipeline",
    "gpipe",
    "GPipe (Huang et al., 2019): each batch split into micro-batches that flow through the "
    "stages forward, then backward; gradients summed over them; one update per batch.",
    param(
        "microbatches",
        INT,
        4,
        "Micro-batches per batch (on each slice of the batch axes); more shrink the bubble, "
        "(S - 1) / (M + S - 1).",
        range=POSITIVE,
    ),
    param(
        "remat",
        BOOL,
        True,
        "Keep only each stage's inputs per micro-batch and recompute its forward in the "
        "backward pass, as GPipe does (about a third more compute; without it a device keeps "
        "every tick's activations of every stage's branch: 3.7x the memory, measured).",
    ),
    positional=("microbatches",),
)

declare(
    "stages",
    "auto",
    "The optimal contiguous split of the model's layers by the cost model: the slowest "
    "stage as fast as it can be, every stage within its device's memory.",
)

declare(
    "stages",
    "manual",
    'Stages begin where listed: manual(["blocks.2", "norm"]) names the top-level layer (a '
    "repeat's copy such as blocks.2) each stage after the first begins at.",
    param("starts", list_of(STR), [], "The layer each stage after the first begins at."),
    positional=("starts",),
)

# --- export formats ----------------------------------------------------------------------------

_NORMALIZE = param(
    "normalize",
    BOOL,
    True,
    "False exports the raw score of a given next token instead of the logits over the "
    "vocabulary: one row of the output layer per token, for self-normalised models (nce, "
    "snis variant B).",
)

declare(
    "export",
    "onnx",
    "ONNX graph of the inference model, for ONNX Runtime and similar servers.",
    param("quantize", one_of(*QUANTIZE_MODES), "none", "Post-training quantisation to apply."),
    param("opset", INT, 17, "ONNX operator set version to target.", range=POSITIVE),
    _NORMALIZE,
    param(
        "sentences",
        BOOL,
        False,
        "True adds a language model's sentence scorer (sequence.onnx): whole sentences "
        "scored in one call, for n-best rescoring, instead of a call per word. Its file holds "
        "the weights again, so the artifact is about twice the size.",
    ),
    positional=(),
)

declare(
    "export",
    "tflite",
    "TensorFlow Lite flatbuffer of the inference model, for mobile and embedded targets.",
    param("quantize", one_of(*QUANTIZE_MODES), "none", "Post-training quantisation to apply."),
    _NORMALIZE,
    param(
        "keep_float",
        list_of(STR),
        [],
        'Layers (paths such as "frontend" or "encoder.0") that quantize = "int8" leaves in '
        "float: a speech front end, whose power spectrum no 8-bit scale holds.",
    ),
    positional=(),
)

declare(
    "export",
    "savedmodel",
    "TensorFlow SavedModel directory with a serving signature, for TF Serving.",
)
