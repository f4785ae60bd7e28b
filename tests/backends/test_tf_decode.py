"""In-graph decoding on TensorFlow (`TfDecoder`) against the reference decoder.

Why: `TfDecoder` runs each whole decode loop inside one `tf.function` (a `tf.while_loop` over
steps, the full forward recomputed over a fixed buffer), where
`seqc.run.decoding.search.Decoder` runs one forward per step from Python. Driven by the same
`TfModel` and params, greedy decoding and beam search must give the reference's tokens exactly.
Sampling draws from TF's stateless generator, not numpy's, so it is checked by its properties:
one output per seed, and temperature, top-k and top-p cut the distribution where the reference
does.

The models are tiny (width 32, one layer, 50 tokens) and trained for a few seconds on toy tasks:
an LM whose lines count up from a random token and end after a random length, and an
encoder-decoder that reverses its source. So EOS arrives at various steps, beam search keeps
finished and open hypotheses side by side, and decisions are rarely near ties.
"""

from __future__ import annotations

import numpy as np
import pytest
from toy_decoding import BOS, EOS, PAD, Setup, cases, strategy
from toy_decoding import lm as lm
from toy_decoding import mt as mt

from seqc.backends.tf.decode import TfDecoder
from seqc.backends.tf.train import TfModel
from seqc.compiler.config import DecodeConfig
from seqc.resolve.values import CallValue
from seqc.run.decoding.search import Decoder


@pytest.fixture(scope="module", params=["lm", "mt"])
def setup(request: pytest.FixtureRequest) -> Setup:
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def made() -> dict[str, tuple[Decoder, TfDecoder]]:
    """Each model's decoders, by task, made once for the module."""
    return {}


def pair(made: dict[str, tuple[Decoder, TfDecoder]], setup: Setup) -> tuple[Decoder, TfDecoder]:
    """The reference and the in-graph decoder on the same model; shared so traces are reused
    (a test that counts traces, or fuses a reference decoder, makes its own)."""
    if setup.task not in made:
        m = setup.model
        made[setup.task] = (
            Decoder(m, m.params, BOS, EOS, PAD),
            TfDecoder(m, m.params, BOS, EOS, PAD),
        )
    return made[setup.task]


@pytest.fixture(scope="module")
def decoders(setup: Setup, made: dict[str, tuple[Decoder, TfDecoder]]) -> tuple[Decoder, TfDecoder]:
    return pair(made, setup)


@pytest.fixture(scope="module")
def lm_decoders(lm: Setup, made: dict[str, tuple[Decoder, TfDecoder]]) -> tuple[Decoder, TfDecoder]:
    return pair(made, lm)


# ---------------------------------------------------------------------------- greedy and beam


def test_greedy_matches_reference(setup: Setup, decoders: tuple[Decoder, TfDecoder]) -> None:
    ref, dec = decoders
    greedy = strategy("greedy", max_length=12)
    lengths = []
    for prompt, src in cases(setup):
        want = ref.generate(greedy, prompt, src)
        assert dec.generate(greedy, prompt, src) == want, (prompt, src)
        lengths.append(len(want))
    assert min(lengths) < 12, "no output ended at EOS: the stop is untested"


def test_lm_runs_past_eos_without_stop_at_eos(
    lm: Setup, lm_decoders: tuple[Decoder, TfDecoder]
) -> None:
    """A multi-line sample: EOS is kept and decoding goes on, as in the reference."""
    ref, dec = lm_decoders
    greedy = strategy("greedy", max_length=20)
    outs = [dec.generate(greedy, p, stop_at_eos=False) for p in lm.prompts]
    assert outs == [ref.generate(greedy, p, stop_at_eos=False) for p in lm.prompts]
    assert all(len(o) == 20 for o in outs)
    assert any(EOS in o for o in outs)


@pytest.mark.parametrize("width", [2, 4])
def test_beam_matches_reference(
    setup: Setup, decoders: tuple[Decoder, TfDecoder], width: int
) -> None:
    """Every length penalty runs on one trace (alpha is a tensor); among the outputs some end at
    EOS before `max_length`, and some differ from greedy, so the beam bookkeeping is exercised."""
    ref, dec = decoders
    greedy = strategy("greedy", max_length=12)
    ended, differs = 0, 0
    for alpha in (0.0, 0.6, 1.5):
        beam = strategy("beam", width=width, length_penalty=alpha, max_length=12)
        for prompt, src in cases(setup):
            want = ref.generate(beam, prompt, src)
            assert dec.generate(beam, prompt, src) == want, (alpha, prompt, src)
            ended += len(want) < 12
            differs += want != ref.generate(greedy, prompt, src)
    assert ended and differs, (ended, differs)


class Favour:
    """A fusion bonus that favours one token wherever it is appended (a stand-in LM)."""

    def __init__(self, token: int, weight: float) -> None:
        self.token, self.weight = token, weight

    def extension(self, prefix: tuple[int, ...], tokens: np.ndarray) -> np.ndarray:
        return np.where(tokens == self.token, self.weight, 0.0)

    def final(self, prefix: tuple[int, ...]) -> float:
        return 0.0


def test_a_fused_beam_leaves_the_graph_loop_for_the_reference_one(
    lm: Setup, lm_decoders: tuple[Decoder, TfDecoder]
) -> None:
    """The in-graph loop cannot ask a Python LM at each step: `with_fusion` gives the reference
    loop over the same model and params, with the bonus (before it, TF decoded as if no LM
    had been named). The bonus changes outputs, and they are the reference decoder's fused
    ones."""
    from seqc.run.decoding.decoders import with_fusion

    m, dec = lm.model, lm_decoders[1]
    beam = strategy("beam", width=3, max_length=12)
    plain = [dec.generate(beam, p) for p in lm.prompts]
    token = next(t for t in range(4, 50) if all(t not in out for out in plain))
    fused = with_fusion(dec, Favour(token, 4.0))
    assert not isinstance(fused, TfDecoder)
    reference = with_fusion(Decoder(m, m.params, BOS, EOS, PAD), Favour(token, 4.0))
    outs = [fused.generate(beam, p) for p in lm.prompts]
    assert outs == [reference.generate(beam, p) for p in lm.prompts]
    assert outs != plain and any(token in out for out in outs)


# ---------------------------------------------------------------------------- sampling


def test_sampling_is_reproducible_per_seed(
    lm: Setup, lm_decoders: tuple[Decoder, TfDecoder]
) -> None:
    dec = lm_decoders[1]
    sample = strategy("sample", temperature=1.5, max_length=12)
    prompt = lm.prompts[1]
    first = [dec.generate(sample, prompt, seed=s) for s in range(1, 6)]
    assert first == [dec.generate(sample, prompt, seed=s) for s in range(1, 6)]
    assert len({tuple(o) for o in first}) > 1, "every seed drew the same tokens"
    # With no seed argument the strategy's own seed is used.
    seeded = strategy("sample", temperature=1.5, max_length=12, seed=3)
    assert dec.generate(seeded, prompt) == first[2]


@pytest.mark.parametrize(
    "args", [{"temperature": 1e-6}, {"top_k": 1}, {"top_p": 1e-9}], ids=["cold", "top1", "p0"]
)
def test_sampling_without_choice_is_greedy(
    setup: Setup, decoders: tuple[Decoder, TfDecoder], args: dict[str, float]
) -> None:
    """A temperature near zero, top-k of 1 or a nucleus of one token leave one candidate."""
    ref, dec = decoders
    greedy = strategy("greedy", max_length=12)
    sample = strategy("sample", max_length=12, **({"temperature": 2.0} | args))
    for prompt, src in cases(setup):
        assert dec.generate(sample, prompt, src, seed=7) == ref.generate(greedy, prompt, src)


def next_logp(model: TfModel, prefix: list[int]) -> np.ndarray:
    """The LM's float64 log-probabilities of the token after `prefix` (BOS included)."""
    logits = np.asarray(model.logits(model.params, {"inputs": np.asarray([prefix], np.int32)}))
    z = logits[0, -1].astype(np.float64)
    return z - z.max() - np.log(np.exp(z - z.max()).sum())


@pytest.mark.parametrize("args", [{"top_k": 3}, {"top_p": 0.6}], ids=["top_k", "top_p"])
def test_sampled_tokens_lie_in_the_kept_set(
    lm: Setup, lm_decoders: tuple[Decoder, TfDecoder], args: dict[str, float]
) -> None:
    """Replayed with the model, every sampled token is among the 3 most likely (top-k) or in the
    smallest set of most likely tokens whose mass reaches 0.6 at temperature 2 (top-p)."""
    m, dec = lm.model, lm_decoders[1]
    temperature = 2.0
    sample = strategy("sample", max_length=10, temperature=temperature, **args)
    for seed in range(4):
        prefix = [BOS, *lm.prompts[2]]
        for tok in dec.generate(sample, lm.prompts[2], seed=seed):
            logp = next_logp(m, prefix) / temperature
            order = np.argsort(-logp)
            if "top_k" in args:
                kept = order[:3]
            else:
                p = np.exp(logp - logp.max())
                p /= p.sum()
                mass = np.cumsum(p[order]) - p[order]
                kept = order[mass < args["top_p"]]
            assert tok in kept, (seed, prefix, tok, kept)
            prefix.append(tok)


# ---------------------------------------------------------------------------- compilation


def test_one_trace_per_kind_length_and_width(lm: Setup, mt: Setup) -> None:
    """Prompts, sources, seeds and sampling knobs are tensors: a new trace only for a new strategy
    kind, buffer length (BOS + prompt + max_length rounded up to 16) or beam width."""
    m = lm.model
    dec = TfDecoder(m, m.params, BOS, EOS, PAD)
    greedy = strategy("greedy", max_length=12)
    for prompt in ([], [5], [5, 6, 7]):  # buffers of 16
        dec.generate(greedy, prompt)
    assert dec.trace_count == 1
    dec.generate(greedy, list(range(5, 15)))  # a buffer of 32
    assert dec.trace_count == 2
    for seed, temperature, top_k in ((1, 0.5, 0), (2, 1.0, 5), (3, 2.0, 0)):
        sample = strategy("sample", temperature=temperature, top_k=top_k, max_length=10)
        dec.generate(sample, [7], seed=seed)
    assert dec.trace_count == 3
    for alpha in (0.0, 0.6):
        for prompt in ([], [5, 6]):
            beam = strategy("beam", width=3, length_penalty=alpha, max_length=12)
            dec.generate(beam, prompt)
    assert dec.trace_count == 4

    mm = mt.model
    dec = TfDecoder(mm, mm.params, BOS, EOS, PAD)
    for src in mt.sources:  # sources of 3 to 16 tokens
        dec.generate(greedy, [], src)
    assert dec.trace_count == 1


def test_errors_name_the_problem(mt: Setup) -> None:
    m = mt.model
    dec = TfDecoder(m, m.params, BOS, EOS, PAD)
    with pytest.raises(ValueError, match="needs `src`"):
        dec.generate(strategy("greedy"), [])
    with pytest.raises(ValueError, match="expected one of greedy, sample, beam"):
        nucleus = CallValue(kind="nucleus", namespace="decode", args={"max_length": 4})
        dec.generate(DecodeConfig.of(nucleus), [], [5])
