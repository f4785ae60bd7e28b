"""Incremental decoding (`StepDecoder` over the step graph) against the reference decoder.

On the same trained toy models as `test_tf_decode.py` (`toy_decoding.py`: an LM that counts, an
encoder-decoder that reverses), greedy decoding and beam search over the encoder and
decoder-step graphs, with caches fed back step by step, give exactly the tokens of the reference
decoder, which reruns the full forward pass at every step.
"""

from __future__ import annotations

import pytest
from toy_decoding import BOS, EOS, PAD, Setup, cases, strategy
from toy_decoding import lm as lm
from toy_decoding import mt as mt

from seqc.backends.jax.step import JaxStepFunctions
from seqc.compiler.incremental import incremental, stepping_inputs
from seqc.compiler.signature import input_fields
from seqc.compiler.step_signature import StepSignature
from seqc.run.decoding.decoders import decoder_for
from seqc.run.decoding.search import Decoder
from seqc.run.decoding.steps import StepDecoder


@pytest.fixture(scope="module", params=["lm", "mt"])
def pair(request: pytest.FixtureRequest) -> tuple[Setup, Decoder, StepDecoder]:
    setup: Setup = request.getfixturevalue(request.param)
    m = setup.model
    program = incremental(m.graph, stepping_inputs(m.graph))
    fns = JaxStepFunctions(program, m.numpy_params())
    sig = StepSignature.of(program, input_fields(m.graph))
    return (
        setup,
        Decoder(m, m.params, BOS, EOS, PAD),
        StepDecoder(fns, sig, BOS, EOS, PAD),
    )


def test_greedy_over_the_step_graph_matches_the_reference(pair) -> None:
    setup, ref, dec = pair
    greedy = strategy("greedy", max_length=12)
    lengths = []
    for prompt, src in cases(setup):
        want = ref.generate(greedy, prompt, src)
        assert dec.generate(greedy, prompt, src) == want, (prompt, src)
        lengths.append(len(want))
    assert min(lengths) < 12


@pytest.mark.parametrize(("width", "alpha"), [(2, 0.0), (4, 0.6)])
def test_beam_over_the_step_graph_matches_the_reference(pair, width: int, alpha: float) -> None:
    setup, ref, dec = pair
    beam = strategy("beam", width=width, length_penalty=alpha, max_length=12)
    for prompt, src in cases(setup)[:4]:
        assert dec.generate(beam, prompt, src) == ref.generate(beam, prompt, src), (prompt, src)


def test_sampling_over_the_step_graph_matches_the_reference(pair) -> None:
    """Both draw with numpy's generator from the same seed: the same samples."""
    setup, ref, dec = pair
    sample = strategy("sample", temperature=0.8, top_k=10, max_length=10)
    for prompt, src in cases(setup)[:3]:
        want = ref.generate(sample, prompt, src, seed=7)
        assert dec.generate(sample, prompt, src, seed=7) == want


def test_step_functions_agree_across_backends(pair) -> None:
    """Every backend's `step_functions` (the contract's) compute the same step: TF's against
    JAX's, teacher-forced over a batch of the setup's inputs."""
    import numpy as np

    from seqc.backends.registry import backend
    from seqc.run.decoding.forced import teacher_forced

    setup, _, dec = pair
    m = setup.model
    program = incremental(m.graph, stepping_inputs(m.graph))
    params = m.numpy_params()
    tokens = np.asarray([[BOS, 12, 13, 14, 15, 16], [BOS, 30, 31, PAD, PAD, PAD]], np.int32)
    arrays = {"inputs": tokens, "tgt_in": tokens}
    src = np.asarray([[7, 8, 9, EOS], [21, EOS, PAD, PAD]], np.int32)
    arrays |= {"src": src, "src_mask": src != PAD}
    logits = [
        teacher_forced(backend(name).step_functions(program, params), dec.sig, arrays)
        for name in ("jax", "tf")
    ]
    assert logits[0].shape == (2, 6, logits[0].shape[-1])
    np.testing.assert_allclose(logits[1], logits[0], atol=2e-5, rtol=1e-5)


def test_the_run_commands_decode_over_the_step_graph(mt: Setup) -> None:
    """`decoder_for` (what eval, decode, export and the sample after training use) decodes a
    trained TF model over its step graph, with the reference's tokens; a source whose length is
    no multiple of the bucket is padded (JAX) or traced once more (TF) without changing them."""
    m = mt.model
    dec = decoder_for(m, m.params, BOS, EOS, PAD)
    assert isinstance(dec, StepDecoder)
    ref = Decoder(m, m.params, BOS, EOS, PAD)
    beam = strategy("beam", width=4, length_penalty=0.6, max_length=12)
    for prompt, src in cases(mt)[:3]:
        assert dec.generate(beam, prompt, src) == ref.generate(beam, prompt, src), src
