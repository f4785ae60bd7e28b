"""Built-in layers for speech (namespace "layer"): the audio front end and the Conformer.

Why these are layers and not a preprocessing step: a front end written as a layer is lowered to
the same primitives as the rest of the model (a strided convolution with a fixed DFT kernel, a
mel matrix, a log), so JAX, TF, ONNX and TFLite all compute it and an exported artifact takes
raw audio. Nothing outside the artifact has to reproduce the features bit for bit.

Layers that change the rate of the time axis (`LogMelFilterbank`, `Conv2DSubsampling`) also
map a padding mask to their output rate: `frontend.mask(audio_mask)` in a forward body gives the
mask of the frames the layer outputs (a frame is real when every sample it covers is real).
"""

from __future__ import annotations

from typing import Final

from seqc.spec.catalogue.layers import DIM, HEADS_DIVIDE_D, NAMESPACE, RATE
from seqc.spec.kinds import Relation, declare, param
from seqc.spec.types import (
    BOOL,
    FLOAT,
    INT,
    NON_NEGATIVE,
    POSITIVE,
    between,
    list_of,
    one_of,
    optional,
)

ODD_KERNEL: Final[Relation] = Relation(
    "kernel % 2 == 1",
    ("kernel",),
    lambda k: k % 2 == 1,
    "kernel",
    hint="an odd kernel is centred on its frame (the convolution keeps the length)",
)

declare(
    NAMESPACE,
    "LogMelFilterbank",
    "Log mel filterbank features of raw audio: float samples [B, N] -> [B, F, bins], with "
    "F = (N - frame) // hop + 1 frames (a frame of `frame_ms`, every `hop_ms`). A periodic Hann "
    "window, a DFT of `fft` points computed as one strided convolution, the power (or "
    "magnitude) spectrum, a triangular mel filterbank (HTK mel scale, as tf.signal's), then "
    "log(x + eps). Has no weights. `.mask(audio_mask)` gives the frames' mask.",
    param("sample_rate", DIM, 16000, "Samples per second of the input audio."),
    param("bins", DIM, 80, "Number of mel bands."),
    param("frame_ms", FLOAT, 25.0, "Window length in milliseconds.", range=POSITIVE),
    param("hop_ms", FLOAT, 10.0, "Step between windows in milliseconds.", range=POSITIVE),
    param(
        "fft",
        optional(DIM),
        None,
        "DFT length; none means the smallest power of two that holds a window.",
    ),
    param("lower_hz", FLOAT, 20.0, "Lower edge of the lowest mel band.", range=NON_NEGATIVE),
    param(
        "upper_hz",
        optional(FLOAT),
        None,
        "Upper edge of the highest mel band; none means sample_rate / 2.",
        range=POSITIVE,
    ),
    param("magnitude", BOOL, False, "Use the magnitude spectrum instead of the power spectrum."),
    param("eps", FLOAT, 1e-6, "Added before the log, so silence is finite.", range=POSITIVE),
    param(
        "vtlp",
        list_of(FLOAT.within(between(0.7, 1.3))),
        [],
        "Vocal tract length perturbation in training: [low, high], each utterance's frequency "
        "axis warped by a factor drawn uniformly between them (0.9 to 1.1 is usual) before the "
        "filterbank; [] (the default) or [1, 1] warps nothing. Outside training, and in every "
        "export, it is not there.",
    ),
    positional=("sample_rate", "bins", "frame_ms", "hop_ms"),
    relations=(
        Relation(
            "vtlp is [] or [low, high] with low <= high",
            ("vtlp",),
            lambda v: len(v) == 0 or (len(v) == 2 and v[0] <= v[1]),
            "vtlp",
            hint="give two warp factors, the lower first: vtlp = [0.9, 1.1]",
        ),
    ),
)

declare(
    NAMESPACE,
    "SpecAugment",
    "SpecAugment (Park et al., 2019) without time warping: during training, zeroes "
    "`freq_masks` bands of up to `freq_width` feature bins and `time_masks` spans of up to "
    "`time_width` frames in each utterance; the identity in evaluation, decoding and export: "
    "[B, T, bins] -> [B, T, bins]. Has no weights.",
    param("freq_masks", INT, 2, "Frequency bands masked per utterance.", range=NON_NEGATIVE),
    param("freq_width", INT, 27, "Widest frequency band, in bins.", range=NON_NEGATIVE),
    param("time_masks", INT, 2, "Time spans masked per utterance.", range=NON_NEGATIVE),
    param("time_width", INT, 40, "Longest time span, in frames.", range=NON_NEGATIVE),
)

declare(
    NAMESPACE,
    "UtteranceNorm",
    "Per-utterance mean normalisation of features over time (cepstral mean normalisation; with "
    "`variance = true`, mean and variance): each feature bin's mean over the utterance's real "
    "frames is subtracted (and the result divided by the bin's standard deviation over them): "
    "[B, T, bins] -> [B, T, bins]. Takes `mask = frame_mask`: padding frames neither count "
    "nor keep a value (they come out 0); without a mask every frame counts. Why: a voice's or "
    "a channel's constant colouring is an offset of the log-mel features, which this removes "
    "from each utterance on its own, in training and in every export alike (a deployed model "
    "normalises what it hears, with no statistics to carry). Has no weights.",
    param("variance", BOOL, False, "Divide by each bin's standard deviation too."),
    param("eps", FLOAT, 1e-5, "Added to the variance before its square root.", range=POSITIVE),
)

declare(
    NAMESPACE,
    "Conv2DSubsampling",
    "Two 3x3 convolutions with stride 2 over (time, feature), each followed by a ReLU, then a "
    "linear map to `d`: [B, T, bins] -> [B, T', d] with T' = ((T - 3) // 2 - 1) // 2 + 1 "
    "(four times fewer frames, as ESPnet's Conv2dSubsampling). `.mask(frame_mask)` gives "
    "the output frames' mask.",
    param("bins", DIM, doc="Width of the input features."),
    param("d", DIM, doc="Width of the output."),
    param("channels", optional(DIM), None, "Channels of both convolutions; none means d."),
    param("dropout", RATE, 0.0, "Dropout rate on the output during training."),
    positional=("bins", "d"),
)

declare(
    NAMESPACE,
    "Conformer",
    "A Conformer block (Gulati et al., 2020): half a feed-forward, multi-head self-attention "
    "(with rotary positions), a convolution module (pointwise, GLU, depthwise, norm, swish, "
    "pointwise), half a feed-forward, each with a pre-norm and a residual, then a final norm: "
    "[B, T, d] -> [B, T, d]. Takes `mask = frame_mask`: attention skips padding frames, and the "
    "depthwise convolution reads zeros there. The convolution module's norm is a LayerNorm "
    "(batch statistics would differ between training and a one-utterance artifact).",
    param("d", DIM, doc="Width of the input and output."),
    param("heads", DIM, 4, "Number of attention heads."),
    param("ff", optional(DIM), None, "Hidden width of each feed-forward; none means 4 * d."),
    param("kernel", DIM, 15, "Width of the depthwise convolution, in frames (odd)."),
    param("dropout", RATE, 0.1, "Dropout rate on each residual branch during training."),
    param("attention_dropout", RATE, 0.0, "Dropout rate on the attention weights during training."),
    param(
        "positions",
        one_of("rotary", "none"),
        "rotary",
        "How attention sees order: rotary position embeddings on queries and keys, or none "
        "(the convolution module still sees order).",
    ),
    param("head_dim", optional(DIM), None, "Width of each head; none means d / heads."),
    param("bias", BOOL, True, "Learn bias vectors in the projections."),
    positional=("d", "heads"),
    relations=(HEADS_DIVIDE_D, ODD_KERNEL),
)
