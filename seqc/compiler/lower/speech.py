"""Speech layers lowered to primitives: the log-mel front end, SpecAugment, UtteranceNorm,
Conv2DSubsampling and the Conformer block.

The front end is a strided convolution whose fixed kernel holds a windowed DFT (cosines and
sines), so the features are computed by the same conv primitive in JAX, TF, ONNX and TFLite and
an exported artifact takes raw audio. Why not an FFT primitive: ONNX's DFT op and TFLite's RFFT
are not available in every runtime and quantizer we target, and a 400-sample window times 257
frequencies is ~0.2 MFLOP a frame, small beside the encoder.

Masks at a new rate (`layer.mask(m)`) use the same convolution geometry as the features, with a
one-hot kernel on the last sample (or frame) a window covers, so a frame is real exactly when
everything it read was real, and the mask's symbolic length is the features' own.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from seqc.compiler.graph import GraphBuilder, Init
from seqc.compiler.lower.attention import NEG_INF, key_mask
from seqc.compiler.lower.call import LayerCall, lowering, mask_lowering
from seqc.compiler.lower.dense import linear
from seqc.spec.errors import CheckError

if TYPE_CHECKING:  # numpy loads when a function needs it: `seqc check` lowers without it
    import numpy as np

# ------------------------------------------------------------------------- the front end


def frame_geometry(args: dict) -> tuple[int, int, int]:
    """(window, hop, fft) in samples for a LogMelFilterbank's args."""
    rate = int(args["sample_rate"])
    window = round(rate * float(args["frame_ms"]) / 1000.0)
    hop = round(rate * float(args["hop_ms"]) / 1000.0)
    fft = args.get("fft") or 1 << max(0, (window - 1).bit_length())
    return window, hop, int(fft)


def hann(window: int) -> np.ndarray:
    """The periodic Hann window (tf.signal.hann_window's default)."""
    import numpy as np

    n = np.arange(window, dtype=np.float64)
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * n / window)


def dft_kernel(window: int, fft: int) -> np.ndarray:
    """[window, 1, 2 * (fft // 2 + 1)]: the windowed real (cos) then imaginary (-sin) DFT
    rows of an `fft`-point transform of a `window`-sample frame (zero padding implied)."""
    import numpy as np

    bins = fft // 2 + 1
    n = np.arange(window, dtype=np.float64)[:, None]
    k = np.arange(bins, dtype=np.float64)[None, :]
    angle = 2.0 * np.pi * n * k / fft
    w = hann(window)[:, None]
    kernel = np.concatenate([w * np.cos(angle), -w * np.sin(angle)], axis=1)
    return kernel[:, None, :].astype(np.float32)


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    import numpy as np

    return 1127.0 * np.log1p(hz / 700.0)


def mel_matrix(bins: int, spectrum: int, rate: int, lower: float, upper: float) -> np.ndarray:
    """[spectrum, bins] triangular filters on the HTK mel scale, the construction of
    tf.signal.linear_to_mel_weight_matrix: band edges evenly spaced in mel, weights linear in
    mel between them, and the DC bin left out."""
    import numpy as np

    freqs = np.linspace(0.0, rate / 2.0, spectrum)[1:]
    mel = _hz_to_mel(freqs)[:, None]
    edges = np.linspace(_hz_to_mel(np.asarray(lower)), _hz_to_mel(np.asarray(upper)), bins + 2)
    left, centre, right = edges[:-2], edges[1:-1], edges[2:]
    up = (mel - left) / (centre - left)
    down = (right - mel) / (right - centre)
    weights = np.maximum(0.0, np.minimum(up, down))
    return np.pad(weights, ((1, 0), (0, 0))).astype(np.float32)


def _check_rank(b: GraphBuilder, c: LayerCall, x: int, want: str, rank: int) -> None:
    if b.type(x).rank != rank:
        raise CheckError(
            f"`{c.path}` ({c.kind}) takes {want}",
            span=c.span,
            code="shape-mismatch",
            expected=want,
            found=str(b.type(x)),
        )


@lowering("LogMelFilterbank")
def _log_mel(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs()
    audio = c.one_input()
    _check_rank(b, c, audio, "float audio samples [B, N]", 2)
    window, hop, fft = frame_geometry(c.args)
    rate, n_mel = int(c.args["sample_rate"]), int(c.args["bins"])
    upper = float(c.args.get("upper_hz") or rate / 2.0)
    lower = float(c.args.get("lower_hz", 20.0))
    if not lower < upper <= rate / 2.0:
        raise CheckError(
            f"`{c.path}`: the mel bands must lie between 0 and the Nyquist frequency",
            span=c.span,
            code="bad-range",
            expected=f"lower_hz < upper_hz <= {rate / 2:g}",
            found=f"lower_hz = {lower:g}, upper_hz = {upper:g}",
        )
    bsz, n = b.type(audio).shape
    x = b.reshape(b.cast(audio, "float32"), (bsz, n, 1))
    spec = b.conv1d(x, b.constant(dft_kernel(window, fft)), hop, "valid")  # [B, F, 2K]
    k = fft // 2 + 1
    re, im = b.slice(spec, -1, 0, k), b.slice(spec, -1, k, 2 * k)
    power = b.binary("add", b.unary("square", re), b.unary("square", im))
    if c.args.get("magnitude"):
        power = b.unary("sqrt", power)
    warp = [float(v) for v in c.args.get("vtlp") or ()]
    if warp:
        power = b.vtlp(power, warp[0], warp[1])
    mel = b.matmul(power, b.constant(mel_matrix(n_mel, k, rate, lower, upper)))
    return b.unary("log", b.binary("add", mel, b.constant(float(c.args.get("eps", 1e-6)))))


def _mask_by_window(b: GraphBuilder, c: LayerCall, mask: int, width: int, stride: int) -> int:
    """bool[B, T] -> bool[B, T']: output position i of a valid convolution of this width and
    stride is real when the last input it reads, i * stride + width - 1, is real."""
    import numpy as np

    tm = b.type(mask)
    if tm.rank != 2:
        raise CheckError(
            f"`{c.path}.mask` takes a padding mask [B, T]",
            span=c.span,
            code="shape-mismatch",
            expected="bool[B, T]",
            found=str(tm),
        )
    bsz, t = tm.shape
    m = b.reshape(b.cast(mask, "float32"), (bsz, t, 1))
    tap = np.zeros((width, 1, 1), np.float32)
    tap[-1] = 1.0
    out = b.conv1d(m, b.constant(tap), stride, "valid")
    out_t = b.type(out).shape[1]
    return b.binary("greater", b.reshape(out, (bsz, out_t)), b.constant(0.5))


@mask_lowering("LogMelFilterbank")
def _log_mel_mask(b: GraphBuilder, c: LayerCall) -> int:
    window, hop, _ = frame_geometry(c.args)
    return _mask_by_window(b, c, c.one_input(), window, hop)


@lowering("SpecAugment")
def _spec_augment(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs()
    x = c.one_input()
    _check_rank(b, c, x, "features [B, T, bins]", 3)
    a = c.args
    if not (a["freq_masks"] and a["freq_width"]) and not (a["time_masks"] and a["time_width"]):
        return x
    return b.spec_augment(
        x, int(a["freq_masks"]), int(a["freq_width"]), int(a["time_masks"]), int(a["time_width"])
    )


@lowering("UtteranceNorm")
def _utterance_norm(b: GraphBuilder, c: LayerCall) -> int:
    """Mean (and variance) over each utterance's real frames, per bin: sums over the masked
    frames divided by their count (at least 1, so an empty row stays finite)."""
    c.allow_kwargs("mask")
    x = c.one_input()
    _check_rank(b, c, x, "features [B, T, bins]", 3)
    mask = c.kwargs.get("mask")
    bsz, t, _ = b.type(x).shape
    if mask is not None and b.type(mask).shape != (bsz, t):
        raise CheckError(
            f"`{c.path}` (UtteranceNorm) takes the features' frame mask",
            span=c.span,
            code="shape-mismatch",
            expected=f"bool[{bsz}, {t}]",
            found=str(b.type(mask)),
        )
    x = b.cast(x, "float32")
    if mask is None:

        def mean(v: int) -> int:
            return b.reduce("reduce_mean", v, (1,))

    else:
        m = b.reshape(b.cast(mask, "float32"), (bsz, t, 1))
        count = b.binary("maximum", b.reduce("reduce_sum", m, (1,)), b.constant(1.0))

        def mean(v: int) -> int:
            return b.binary("div", b.reduce("reduce_sum", b.binary("mul", v, m), (1,)), count)

    y = b.binary("sub", x, mean(x))
    if c.args.get("variance"):
        var = mean(b.unary("square", y))
        y = b.binary(
            "mul", y, b.unary("rsqrt", b.binary("add", var, b.constant(float(c.args["eps"]))))
        )
    return y if mask is None else b.binary("mul", y, m)


# ------------------------------------------------------------------------- subsampling


def subsampled_bins(bins: int) -> int:
    """Feature width after the two valid 3x3, stride-2 convolutions."""
    return ((bins - 3) // 2 + 1 - 3) // 2 + 1


@lowering("Conv2DSubsampling")
def _conv2d_subsampling(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs()
    x = c.one_input()
    _check_rank(b, c, x, "features [B, T, bins]", 3)
    bins, d = int(c.args["bins"]), int(c.args["d"])
    channels = int(c.args.get("channels") or d)
    if b.type(x).shape[-1] != bins:
        raise CheckError(
            f"`{c.path}` expects {bins} feature bins, the input is {b.type(x)}",
            span=c.span,
            code="shape-mismatch",
            expected=f"[B, T, {bins}]",
            found=str(b.type(x)),
        )
    if subsampled_bins(bins) < 1:
        raise CheckError(
            f"`{c.path}`: {bins} feature bins are too few for two 3x3 stride-2 convolutions",
            span=c.span,
            code="bad-range",
            expected="bins >= 7",
        )
    bsz, t, _ = b.type(x).shape
    h = b.reshape(x, (bsz, t, bins, 1))
    for i, c_in in ((1, 1), (2, channels)):
        he = Init("normal", math.sqrt(2.0 / (9 * c_in)))  # He init: a ReLU follows
        w = b.param(f"conv{i}.w", (3, 3, c_in, channels), he)
        h = b.conv2d(h, w, (2, 2), "valid")
        h = b.binary("add", h, b.param(f"conv{i}.b", (channels,), Init("zeros")))
        h = b.unary("relu", h)
    t_out = _valid(_valid(t))
    width = subsampled_bins(bins) * channels
    h = b.reshape(h, (bsz, t_out, width))
    y = linear(b, h, width, d, "out")
    return b.dropout(y, float(c.args.get("dropout", 0.0)))


def _valid(t: int | str) -> int | str:
    """The length after a valid convolution of width 3, stride 2 (conv1d's symbolic form)."""
    return (t - 3) // 2 + 1 if isinstance(t, int) else f"(({t}-3)//2+1)"


@mask_lowering("Conv2DSubsampling")
def _conv2d_subsampling_mask(b: GraphBuilder, c: LayerCall) -> int:
    return _mask_by_window(b, c, _mask_by_window(b, c, c.one_input(), 3, 2), 3, 2)


# ------------------------------------------------------------------------- Conformer


def _norm(b: GraphBuilder, x: int, d: int, name: str) -> int:
    scale = b.param(f"{name}.scale", (d,), Init("ones"))
    bias = b.param(f"{name}.bias", (d,), Init("zeros"))
    return b.layer_norm(x, scale, bias, 1e-6, False)


def _half_ff(b: GraphBuilder, x: int, d: int, ff: int, name: str, rate: float, bias: bool) -> int:
    """0.5 * FF(LN(x)), the macaron half step (swish hidden layer)."""
    h = _norm(b, x, d, f"{name}.norm")
    h = b.unary("silu", linear(b, h, d, ff, f"{name}.w1", bias))
    h = b.dropout(h, rate)
    h = b.dropout(linear(b, h, ff, d, f"{name}.w2", bias), rate)
    return b.binary("mul", h, b.constant(0.5))


def rotary(b: GraphBuilder, q: int, like: int) -> int:
    """Rotary position embedding (Su et al., 2021) on q [B, T, h, hd]: each pair (i, i + hd/2)
    rotated by position * 10000^(-2i/hd), so q.k depends on the positions' difference only."""
    import numpy as np

    _, t, _, hd = b.type(q).shape
    assert isinstance(hd, int) and hd % 2 == 0
    half = hd // 2
    inv = 1.0 / (10000.0 ** (np.arange(half, dtype=np.float64) * 2.0 / hd))
    pos = b.cast(b.positions(like, axis=1), "float32")  # [T]
    angle = b.binary(
        "mul", b.reshape(pos, (t, 1, 1)), b.constant(inv.astype(np.float32).reshape(1, 1, half))
    )  # [T, 1, half]
    cos, sin = b.unary("cos", angle), b.unary("sin", angle)
    q1, q2 = b.slice(q, -1, 0, half), b.slice(q, -1, half, hd)
    first = b.binary("sub", b.binary("mul", q1, cos), b.binary("mul", q2, sin))
    second = b.binary("add", b.binary("mul", q1, sin), b.binary("mul", q2, cos))
    return b.concat([first, second], axis=-1)


def _attention(b: GraphBuilder, c: LayerCall, x: int, mask: int | None) -> int:
    a = c.args
    d, heads = int(a["d"]), int(a["heads"])
    hd = int(a.get("head_dim") or d // heads)
    inner, bias = heads * hd, bool(a.get("bias", True))
    bsz, t = b.type(x).shape[0], b.type(x).shape[1]

    def split(v: int) -> int:
        return b.reshape(v, (bsz, t, heads, hd))

    q = split(linear(b, x, d, inner, "attn.q", bias))
    k = split(linear(b, x, d, inner, "attn.k", bias))
    v = split(linear(b, x, d, inner, "attn.v", bias))
    if a.get("positions", "rotary") == "rotary":
        if hd % 2:
            raise CheckError(
                f"`{c.path}`: rotary positions need an even head width, got {hd}",
                span=c.span,
                code="bad-heads",
                hint="choose heads so that d / heads is even, or set head_dim",
            )
        q, k = rotary(b, q, x), rotary(b, k, x)
    q = b.binary("mul", q, b.constant(1.0 / math.sqrt(hd)))
    scores = b.einsum("bqhd,bkhd->bhqk", q, k)
    if mask is not None:
        scores = b.where(key_mask(b, c, mask, x), scores, b.constant(NEG_INF))
    probs = b.dropout(b.softmax(scores, axis=-1), float(a.get("attention_dropout", 0.0)))
    ctx = b.reshape(b.einsum("bhqk,bkhd->bqhd", probs, v), (bsz, t, inner))
    return linear(b, ctx, inner, d, "attn.o", bias)


def _conv_module(b: GraphBuilder, c: LayerCall, x: int, mask: int | None) -> int:
    a = c.args
    d, kernel, bias = int(a["d"]), int(a["kernel"]), bool(a.get("bias", True))
    h = linear(b, x, d, 2 * d, "conv.pointwise1", bias)
    h = b.binary("mul", b.slice(h, -1, 0, d), b.unary("sigmoid", b.slice(h, -1, d, 2 * d)))
    if mask is not None:  # padding frames read as zeros, as after the front end's padding
        bsz, t = b.type(mask).shape
        m = b.reshape(b.cast(mask, "float32"), (bsz, t, 1))
        h = b.binary("mul", h, m)
    w = b.param("conv.depthwise.w", (kernel, 1, d), Init("normal", 1.0 / math.sqrt(kernel)))
    h = b.conv1d(h, w, 1, "same", groups=d)
    if bias:
        h = b.binary("add", h, b.param("conv.depthwise.b", (d,), Init("zeros")))
    h = b.unary("silu", _norm(b, h, d, "conv.norm"))
    return linear(b, h, d, d, "conv.pointwise2", bias)


@lowering("Conformer")
def _conformer(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs("mask")
    x = c.one_input()
    a = c.args
    d = int(a["d"])
    if b.type(x).rank != 3 or b.type(x).shape[-1] != d:
        raise CheckError(
            f"`{c.path}` (Conformer) takes [B, T, {d}]",
            span=c.span,
            code="shape-mismatch",
            expected=f"[B, T, {d}]",
            found=str(b.type(x)),
        )
    mask = c.kwargs.get("mask")
    ff, rate, bias = int(a.get("ff") or 4 * d), float(a.get("dropout", 0.1)), bool(a["bias"])
    x = b.binary("add", x, _half_ff(b, x, d, ff, "ff1", rate, bias))
    h = _attention(b, c, _norm(b, x, d, "attn.norm"), mask)
    x = b.binary("add", x, b.dropout(h, rate))
    h = _conv_module(b, c, _norm(b, x, d, "conv.norm_in"), mask)
    x = b.binary("add", x, b.dropout(h, rate))
    x = b.binary("add", x, _half_ff(b, x, d, ff, "ff2", rate, bias))
    return _norm(b, x, d, "norm")
