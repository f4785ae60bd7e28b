"""The speech layers against independent accounts: the log-mel front end against tf.signal, the
frame masks against their definition, and a whole CTC model against its own padding.

Why padding invariance is the test of the masks: every utterance of a batch is padded to the
bucket's length, so a model whose real frames saw any padding would score an utterance
differently in every bucket (and in a one-utterance exported artifact). A Conformer-CTC here
gives the same logits on an utterance's real frames, and the same CTC loss, alone or padded.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
import tensorflow as tf
from lowering_helpers import build, f32, params_of, run

from seqc.backends.jax.ops import Ctx as JaxCtx
from seqc.backends.jax.ops import run_graph as jax_run_graph
from seqc.backends.tf.ops import Ctx as TfCtx
from seqc.backends.tf.ops import run_graph as tf_run_graph
from seqc.compiler.compile import CompiledTask, compile_task
from seqc.compiler.graph import GraphBuilder, TensorType
from seqc.compiler.lower.speech import frame_geometry, mel_matrix
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.spec.errors import CheckError

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "asr" / "spoken_numbers.seq"

MEL_TOLERANCE = 2e-3
"""Largest |ours - tf.signal| of a log-mel value (log units): both compute in float32, ours as a
400-tap convolution, tf.signal with an FFT, so the power spectra differ in the last bits; the
log magnifies that only where a band's energy is tiny."""


def _speechlike(n: int, seed: int) -> np.ndarray:
    """A chirp with harmonics and noise: energy across the mel bands, in [-1, 1]."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000.0
    f0 = 120.0 + 80.0 * t
    x = sum(np.sin(2 * np.pi * k * f0 * t) / k for k in range(1, 12))
    return (0.3 * x / 3.0 + 0.01 * rng.standard_normal(n)).astype(np.float32)


def test_log_mel_matches_tf_signal() -> None:
    audio = np.stack([_speechlike(8000, 0), _speechlike(8000, 1)])
    graph = build("LogMelFilterbank", [f32("B", 8000)], bins=80)
    ours = run(graph, {}, {"x0": audio})
    stft = tf.signal.stft(audio, frame_length=400, frame_step=160, fft_length=512)
    power = tf.math.square(tf.abs(stft))
    weights = tf.signal.linear_to_mel_weight_matrix(80, 257, 16000, 20.0, 8000.0)
    theirs = tf.math.log(tf.matmul(power, weights) + 1e-6).numpy()
    assert ours.shape == theirs.shape == (2, (8000 - 400) // 160 + 1, 80)
    assert np.max(np.abs(ours - theirs)) < MEL_TOLERANCE


def test_mel_matrix_matches_tf_signal() -> None:
    for bins, spectrum, rate, lo, hi in (
        (80, 257, 16000, 20.0, 8000.0),
        (23, 129, 8000, 0.0, 3000.0),
    ):
        want = tf.signal.linear_to_mel_weight_matrix(bins, spectrum, rate, lo, hi).numpy()
        ours = mel_matrix(bins, spectrum, rate, lo, hi)  # float64 math; tf.signal's is float32
        np.testing.assert_allclose(ours, want, atol=5e-5)


def test_frame_masks_follow_their_definition() -> None:
    """A frame is real when every sample it covers is real; after subsampling, when every
    frame the output frame read is real."""
    b = GraphBuilder()
    m = b.input("m", TensorType("bool", ("B", "N")))
    from lowering_helpers import layer_args

    from seqc.compiler.lower.call import MASKS, LayerCall

    args = layer_args("LogMelFilterbank")
    frames = MASKS["LogMelFilterbank"](b, LayerCall("LogMelFilterbank", "f", args, [m]))
    sub_args = layer_args("Conv2DSubsampling", bins=80, d=8)
    sub = MASKS["Conv2DSubsampling"](b, LayerCall("Conv2DSubsampling", "s", sub_args, [frames]))
    b.graph.outputs = [frames, sub]
    n = 16000
    lengths = [16000, 9000, 400, 0]
    mask = np.arange(n)[None, :] < np.array(lengths)[:, None]
    got_frames, got_sub = (
        np.asarray(v)
        for v in jax.jit(lambda x: jax_run_graph(b.graph, {}, x, JaxCtx()))({"m": mask})
    )
    window, hop, _ = frame_geometry(args)
    want_frames = [max(0, (n_ - window) // hop + 1) for n_ in lengths]
    assert got_frames.sum(axis=1).tolist() == want_frames
    want_sub = [
        max(0, (max(0, (f - 3) // 2 + 1) - 3) // 2 + 1) if f >= 7 else 0 for f in want_frames
    ]
    assert got_sub.sum(axis=1).tolist() == want_sub
    assert got_sub.shape[1] == ((got_frames.shape[1] - 3) // 2 + 1 - 3) // 2 + 1


@pytest.fixture(scope="module")
def ctc_task() -> CompiledTask:
    program = load_program(SPEC)
    resolved = resolve(program, "asr.numbers.tiny", ["asr_ctc.model.vocab=12"])
    return compile_task(program, resolved, "asr_ctc")


def _logits_and_loss(
    task: CompiledTask,
    params: dict,
    audio: np.ndarray,
    lengths: list[int],
    labels: np.ndarray | None = None,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """The logits and the CTC criterion's outputs, in one jitted program; the labels are the
    first rows of [[3, 4, 4, 5], [6, 7]] unless given."""
    mask = np.arange(audio.shape[1])[None, :] < np.array(lengths)[:, None]
    if labels is None:
        labels = np.array([[3, 4, 4, 5], [6, 7, 0, 0]][: len(lengths)], np.int32)

    @jax.jit
    def f(p: dict, xs: dict, labels: np.ndarray) -> tuple:
        z = jax_run_graph(task.graph, p, xs, JaxCtx())[0]
        crit = jax_run_graph(
            task.train_criterion, {}, {"logits": z, "labels": labels, "mask": labels > 0}, JaxCtx()
        )
        return z, crit

    z, crit = f(params, {"audio": audio * mask, "audio_mask": mask}, labels)
    return np.asarray(z), [np.asarray(c) for c in crit]


def test_ctc_model_is_padding_invariant(ctc_task: CompiledTask) -> None:
    params = params_of(ctc_task.graph)
    utterance = _speechlike(12000, 3)
    other = _speechlike(20000, 4)
    padded = np.zeros((2, 20000), np.float32)
    padded[0, :12000], padded[1] = utterance, other
    z_pad, (_, nll_pad, tokens_pad) = _logits_and_loss(ctc_task, params, padded, [12000, 20000])
    z_one, (_, nll_one, _) = _logits_and_loss(ctc_task, params, utterance[None], [12000])
    frames = z_one.shape[1]
    np.testing.assert_allclose(z_pad[0, :frames], z_one[0], rtol=1e-4, atol=1e-4)
    # the padding frames say "blank" with certainty, so decoding ignores them
    assert np.all(np.argmax(z_pad[0, frames:], axis=-1) == 0)
    assert float(tokens_pad) == 6.0
    # the batch's summed NLL is the two utterances' own: row 1 alone, with its labels unpadded
    _, (_, nll_two, _) = _logits_and_loss(
        ctc_task, params, other[None], [20000], np.array([[6, 7]], np.int32)
    )
    assert float(nll_pad) == pytest.approx(float(nll_one) + float(nll_two), rel=1e-4)


def test_ctc_model_jax_tf_parity(ctc_task: CompiledTask) -> None:
    params = params_of(ctc_task.graph)
    audio = np.stack([_speechlike(9600, 5), _speechlike(9600, 6)])
    mask = np.arange(9600)[None, :] < np.array([9600, 7000])[:, None]
    inputs = {"audio": audio * mask, "audio_mask": mask}
    want = np.asarray(
        jax.jit(lambda p, x: jax_run_graph(ctc_task.graph, p, x, JaxCtx())[0])(params, inputs)
    )
    tf_params = {k: tf.constant(v) for k, v in params.items()}

    @tf.function(autograph=False)
    def forward(xs: dict) -> tf.Tensor:
        return tf_run_graph(ctc_task.graph, tf_params, xs, TfCtx())[0]

    got = forward({k: tf.constant(v) for k, v in inputs.items()}).numpy()
    real = want > -1e8  # padding frames are -1e9 in both
    scale = np.max(np.abs(want[real]))
    assert np.max(np.abs(got - want)[real]) <= 1e-4 * scale


def test_mask_of_a_layer_that_keeps_the_rate_is_refused(tmp_path: Path) -> None:
    text = SPEC.read_text().replace(
        "mask = subsample.mask(frontend.mask(audio_mask))",
        "mask = norm_in.mask(frontend.mask(audio_mask))",
    )
    spec = tmp_path / "bad.seq"
    spec.write_text(text)
    program = load_program(spec)
    resolved = resolve(program, "asr.numbers.tiny", ["asr_ctc.model.vocab=12"])
    with pytest.raises(CheckError) as e:
        compile_task(program, resolved, "asr_ctc")
    assert e.value.code == "no-mask"
    assert "norm_in" in str(e.value)


def test_ctc_model_without_a_mask_output_is_refused(tmp_path: Path) -> None:
    text = (  # the first model, ConformerCTC, only
        SPEC.read_text()
        .replace(
            "(float32[B, F, vocab], bool[B, F]) {\n    mask", "float32[B, F, vocab] {\n    mask", 1
        )
        .replace(
            "return out(encoder(x, mask = mask)), mask", "return out(encoder(x, mask = mask))", 1
        )
    )
    spec = tmp_path / "bad.seq"
    spec.write_text(text)
    program = load_program(spec)
    resolved = resolve(program, "asr.numbers.tiny", ["asr_ctc.model.vocab=12"])
    with pytest.raises(CheckError) as e:
        compile_task(program, resolved, "asr_ctc")
    assert e.value.code == "ctc-outputs"


def test_joint_ctc_is_the_weighted_sum_of_its_terms_on_both_backends() -> None:
    """joint_ctc(w) = (1 - w) x the decoder's cross-entropy + w x CTC, each as its own
    criterion computes it; TF gives the same training loss as JAX."""
    from seqc.compiler.lower.criterion import lower_criterion
    from seqc.compiler.lower.ctc import lower_ctc
    from seqc.resolve.values import CallValue

    program = load_program(SPEC)
    resolved = resolve(program, "asr.numbers.joint.tiny", ["asr_joint.model.vocab=12"])
    task = compile_task(program, resolved, "asr_joint")
    assert len(task.graph.outputs) == 1 and len(task.training_graph.outputs) == 2
    params = params_of(task.graph)
    audio = np.stack([_speechlike(9600, 7), _speechlike(9600, 8)])
    mask = np.arange(9600)[None, :] < np.array([9600, 8000])[:, None]
    tgt_in = np.array([[1, 5, 6, 0], [1, 7, 0, 0]], np.int32)
    tgt_out = np.array([[5, 6, 2, 0], [7, 2, 0, 0]], np.int32)
    labels = np.array([[5, 6, 0, 0], [7, 0, 0, 0]], np.int32)
    arrays = {
        "audio": audio * mask,
        "audio_mask": mask,
        "tgt_in": tgt_in,
        "tgt_out": tgt_out,
        "tgt_mask": tgt_out > 0,
        "labels": labels,
        "label_mask": labels > 0,
    }
    w = 0.3
    ce = CallValue(
        kind="cross_entropy", namespace="loss", args={"label_smoothing": 0.1, "reduction": "token"}
    )
    ce_graph = lower_criterion(ce, task.graph.ops[task.graph.outputs[0]].type, accuracy=False)
    ctc = CallValue(kind="ctc", namespace="loss", args={"reduction": "token"})
    ctc_graph = lower_ctc(ctc, task.training_graph.ops[task.training_graph.outputs[1]].type)

    @jax.jit  # one program: run op by op, the Conformer takes seconds
    def losses(p: dict, xs: dict) -> tuple:
        both = task.model_output(jax_run_graph(task.training_graph, p, task.inputs(xs), JaxCtx()))
        joint = jax_run_graph(task.train_criterion, {}, task.criterion_inputs(both, xs), JaxCtx())
        tgt, lab = xs["tgt_out"], xs["labels"]
        ce_feeds = {"logits": both[0], "labels": tgt, "mask": tgt > 0}
        ctc_feeds = {"logits": both[1], "labels": lab, "mask": lab > 0}
        ce_loss = jax_run_graph(ce_graph, {}, ce_feeds, JaxCtx())[0]
        ctc_loss = jax_run_graph(ctc_graph, {}, ctc_feeds, JaxCtx())[0]
        return joint, ce_loss, ctc_loss

    joint, ce_loss, ctc_loss = losses(params, arrays)
    want = (1 - w) * float(ce_loss) + w * float(ctc_loss)
    assert float(joint[0]) == pytest.approx(want, rel=1e-5)

    tf_params = {k: tf.constant(v) for k, v in params.items()}

    @tf.function(autograph=False)
    def tf_loss(xs: dict) -> tf.Tensor:
        got = task.model_output(
            tf_run_graph(task.training_graph, tf_params, task.inputs(xs), TfCtx())
        )
        return tf_run_graph(task.train_criterion, {}, task.criterion_inputs(got, xs), TfCtx())[0]

    got = float(tf_loss({k: tf.constant(v) for k, v in arrays.items()}))
    assert got == pytest.approx(float(joint[0]), rel=1e-4)


@pytest.mark.parametrize("variance", [False, True])
def test_utterance_norm_is_each_utterance_s_own_statistics_on_both_backends(
    variance: bool,
) -> None:
    """UtteranceNorm against numpy: each bin's mean (and standard deviation) over the real
    frames only, padding frames out as 0, the same with the padding cut off, JAX = TF."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 9, 4)) * 3.0 + rng.standard_normal((1, 1, 4)) * 5.0).astype(
        np.float32
    )
    lengths = [9, 5]
    mask = np.arange(9)[None, :] < np.asarray(lengths)[:, None]
    graph = build(
        "UtteranceNorm",
        [f32("B", "T", 4)],
        {"mask": TensorType("bool", ("B", "T"))},
        variance=variance,
    )
    ours = run(graph, {}, {"x0": x, "mask": mask})
    for r, n in enumerate(lengths):
        real = x[r, :n].astype(np.float64)
        want = real - real.mean(0)
        if variance:
            want = want / np.sqrt(real.var(0) + 1e-5)
        np.testing.assert_allclose(ours[r, :n], want, rtol=1e-4, atol=1e-4)
        assert not ours[r, n:].any()  # padding frames carry nothing
        alone = run(graph, {}, {"x0": x[r : r + 1, :n], "mask": mask[r : r + 1, :n]})
        np.testing.assert_allclose(alone[0], ours[r, :n], rtol=1e-5, atol=1e-5)
    theirs = tf_run_graph(graph, {}, {"x0": x, "mask": mask}, TfCtx())[0].numpy()
    np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-5)
    bare = build("UtteranceNorm", [f32("B", "T", 4)], variance=variance)  # no mask: all frames
    everything = run(bare, {}, {"x0": x})
    np.testing.assert_allclose(everything[0], ours[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(CheckError, match="takes the features' frame mask"):
        build("UtteranceNorm", [f32("B", "T", 4)], {"mask": TensorType("bool", ("B", "N"))})
