"""Decoding several sources at once (`seqc.run.decoding.steps.decode_all`) against one at a time.

On the trained toy encoder-decoder of `toy_decoding.py` (it reverses its source), greedy and
beam search over batches of sources of different lengths give each source exactly the tokens
that decoding it alone gives, on JAX (caches kept on the device, reordered there) and on TF;
and the scorer of translations decodes in batches. A run's later evaluations reuse the step
functions JAX compiled for the first one.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
from toy_decoding import BOS, EOS, FIRST, PAD, VOCAB, Setup, strategy
from toy_decoding import mt as mt

from seqc.backends.registry import backend
from seqc.compiler.incremental import incremental, stepping_inputs
from seqc.compiler.signature import input_fields
from seqc.compiler.step_signature import StepSignature
from seqc.run.decoding.decoders import decoder_for
from seqc.run.decoding.steps import StepDecoder, decode_all


def sources(n: int = 11, seed: int = 5) -> list[list[int]]:
    """Sources of 1 to 9 tokens and EOS, some padded as `score_translations` pads them."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = rng.integers(FIRST, VOCAB, 1 + i % 9).tolist()
        out.append([*words, EOS] + ([PAD] * 6 if i % 3 == 0 else []))
    return out


@pytest.fixture(scope="module", params=["jax", "tf"])
def decoder(request: pytest.FixtureRequest, mt: Setup) -> StepDecoder:
    m = mt.model
    program = incremental(m.graph, stepping_inputs(m.graph))
    fns = backend(request.param).step_functions(program, m.numpy_params())
    return StepDecoder(fns, StepSignature.of(program, input_fields(m.graph)), BOS, EOS, PAD)


Alone = Callable[[str, dict], list[list[int]]]


@pytest.fixture(scope="module")
def alone(decoder: StepDecoder) -> Alone:
    """`alone(kind, args)`: each of `sources()` decoded one at a time with that strategy, the
    reference the batched decoders are held to. Decoded once per strategy and backend for the
    module: several tests compare against the same reference, and decoding a source alone gives
    the same tokens every time."""
    done: dict[str, list[list[int]]] = {}

    def tokens(kind: str, args: dict) -> list[list[int]]:
        key = repr((kind, sorted(args.items())))
        if key not in done:
            how = strategy(kind, **args)
            done[key] = [decoder.generate(how, [], s) for s in sources()]
        return done[key]

    return tokens


@pytest.mark.parametrize("batch", [4, 16])
@pytest.mark.parametrize(
    "call",
    [
        ("greedy", {"max_length": 12}),
        ("beam", {"width": 3, "length_penalty": 0.6, "max_length": 12}),
        ("beam", {"width": 4, "length_penalty": 0.0, "max_length": 5}),
    ],
)
def test_batched_decoding_matches_one_at_a_time(
    decoder: StepDecoder, alone: Alone, batch: int, call: tuple[str, dict]
) -> None:
    kind, args = call
    how = strategy(kind, **args)
    srcs = sources()
    one_at_a_time = alone(kind, args)
    assert decoder.generate_many(how, srcs, batch) == one_at_a_time
    # the toy model reverses its source: decoding is not trivially empty or constant
    if kind == "greedy":
        assert sum(
            a == [t for t in s if t not in (EOS, PAD)][::-1]
            for a, s in zip(one_at_a_time, srcs, strict=True)
        )
        assert len({len(a) for a in one_at_a_time}) > 3


def test_sampling_stays_one_source_at_a_time(decoder: StepDecoder) -> None:
    """Sampling draws from one generator in source order: batched or not, the same draws."""
    how = strategy("sample", temperature=0.9, top_k=8, max_length=8)
    srcs = sources(4)
    assert decode_all(decoder, how, srcs, 8) == [decoder.generate(how, [], s) for s in srcs]


def test_translations_are_scored_from_batches(mt: Setup, monkeypatch) -> None:
    """`decoder_for` gives the run commands a decoder that decodes in batches, and
    `score_translations` uses it: one batch call for the split, hypotheses in split order."""
    from seqc.run.decoding import steps as stepbatch
    from seqc.run.scoring.translate import score_translations

    m = mt.model
    dec = decoder_for(m, m.params, BOS, EOS, PAD)
    calls: list[int] = []
    real = stepbatch.decode_batch

    def counted(d, how, srcs):
        calls.append(len(srcs))
        return real(d, how, srcs)

    monkeypatch.setattr(stepbatch, "decode_batch", counted)

    class Tok:
        eos_id, pad_id = EOS, PAD

        def encode(self, text: str) -> list[int]:
            return [int(w) for w in text.split()]

        def decode(self, ids: list[int]) -> str:
            return " ".join(map(str, ids))

    def example(ids: list[int]) -> SimpleNamespace:
        return SimpleNamespace(source=" ".join(map(str, ids)), target=" ".join(map(str, ids[::-1])))

    examples = [example([t for t in s if t not in (EOS, PAD)]) for s in sources(20)]
    pipeline = SimpleNamespace(
        tokenizer=Tok(),
        target_tokenizer=Tok(),
        splits={"dev": SimpleNamespace(examples=examples)},
        buckets=[SimpleNamespace(bound=16)],
    )
    how = strategy("greedy", max_length=12)
    scores = score_translations(dec, pipeline, how, "dev")
    assert calls == [16, 4]
    want = [
        Tok().decode(dec.generate(how, [], [*map(int, e.source.split()), EOS])) for e in examples
    ]
    assert scores["hypotheses"] == want
    assert scores["examples"] == 20


def test_later_evaluations_reuse_what_jax_compiled(mt: Setup) -> None:
    """A run decodes dev at every evaluation with new weights: the second decoder of the same
    model shares the first one's jitted step (no recompiling), and reads its own weights."""
    m = mt.model
    params = m.numpy_params()
    first = decoder_for_backend(m, params)
    other = {k: v * 0.5 if v.dtype.kind == "f" else v for k, v in params.items()}
    second = decoder_for_backend(m, other)
    assert second.fns._step is first.fns._step
    src = sources(3)[1]
    logits = [d.fns.step(_feeds(d, src))[0] for d in (first, second)]
    assert not np.allclose(logits[0], logits[1])
    again = decoder_for_backend(m, params).fns.step(_feeds(first, src))[0]
    np.testing.assert_array_equal(again, logits[0])


def decoder_for_backend(m, params):
    """`decoder_for`'s step decoder on JAX, whatever backend trained the toy model."""
    from seqc.run.decoding.decoders import step_decoder

    jax_model = SimpleNamespace(task=m.task, backend="jax")
    dec = step_decoder(jax_model, params, BOS, EOS, PAD)
    assert isinstance(dec, StepDecoder)
    return dec


def _feeds(dec: StepDecoder, src: list[int]) -> dict:
    from seqc.compiler.incremental import POS

    memory = dec._memory(src, 1)
    return {
        dec.token_input: np.asarray([[BOS]], np.int32),
        POS: np.asarray(0, np.int32),
        **memory,
        **dec.sig.zero_caches(1, 16),
    }


def test_history_caches_grow_as_decoding_goes_on(decoder: StepDecoder, monkeypatch) -> None:
    """Caches start with `FIRST_HISTORY` slots and double when decoding reaches their end:
    the tokens are those of a buffer sized for `max_length` from the start."""
    from seqc.run.decoding import steps as stepdecode

    how = strategy("greedy", max_length=40)
    beam = strategy("beam", width=2, length_penalty=0.6, max_length=40)
    srcs = sources(4)
    grown: list[int] = []
    pad = decoder.sig.pad_history

    def spy(caches: dict, length: int) -> dict:
        grown.append(length)
        return pad(caches, length)

    monkeypatch.setattr(decoder.sig, "pad_history", spy)
    long = [decoder.generate(how, [], s, stop_at_eos=False) for s in srcs]
    short = decoder.generate_many(beam, srcs)
    assert grown and set(grown) == {48} and all(len(t) == 40 for t in long)
    monkeypatch.setattr(stepdecode, "FIRST_HISTORY", 10**6)
    assert [decoder.generate(how, [], s, stop_at_eos=False) for s in srcs] == long
    assert decoder.generate_many(beam, srcs) == short


class _Shrinking:
    """The decoder's step functions, said to run any row count (`shrinks`), counting rows."""

    shrinks = True

    def __init__(self, fns, token_input: str) -> None:
        self.fns, self.token, self.rows = fns, token_input, []

    def __getattr__(self, name: str):
        return getattr(self.fns, name)

    def step(self, feeds: dict):
        self.rows.append(len(feeds[self.token]))
        return self.fns.step(feeds)


@pytest.mark.parametrize(
    "how",
    [
        ("greedy", {"max_length": 12}),
        ("beam", {"width": 3, "length_penalty": 0.6, "max_length": 12}),
    ],
)
def test_finished_sources_leave_the_batch_where_the_runtime_allows(
    decoder: StepDecoder, alone: Alone, how: tuple[str, dict]
) -> None:
    """On a runtime that runs any shape (onnxruntime, LiteRT), a batch drops the rows of the
    sources whose search is over: fewer rows each step, the same tokens."""
    kind, args = how
    strategy_ = strategy(kind, **args)
    srcs = sources(6)  # the first 6 of `sources()`: 1 to 6 tokens, two of them padded
    shrinking = _Shrinking(decoder.fns, decoder.token_input)
    dec = StepDecoder(shrinking, decoder.sig, BOS, EOS, PAD)
    assert decode_all(dec, strategy_, srcs, 16) == alone(kind, args)[:6]
    assert shrinking.rows[0] > shrinking.rows[-1] and shrinking.rows == sorted(
        shrinking.rows, reverse=True
    )
