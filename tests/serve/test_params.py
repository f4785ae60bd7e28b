"""A request's decode options (`seqc.serve.params.strategy_for`): the model's own strategy
without any, changed by those given, and every wrong one a 400 that names it."""

from __future__ import annotations

import pytest

from seqc.compiler.config import Beam, DecodeConfig, Greedy, Sample
from seqc.data.calls import make_call
from seqc.serve.errors import ServeError
from seqc.serve.params import strategy_for
from seqc.serve.protocol import json_number, score_tensor

BASE = DecodeConfig.of(make_call("decode", "greedy", max_length=12))


def test_no_options_is_the_models_own_strategy() -> None:
    assert strategy_for(BASE, {}, 256) == BASE


def test_options_change_the_strategy() -> None:
    beam = strategy_for(BASE, {"beam": 4, "length_penalty": 0.6}, 256)
    assert isinstance(beam, Beam) and (beam.width, beam.length_penalty) == (4, 0.6)
    assert beam.max_length == 12
    assert isinstance(strategy_for(BASE, {"beam": 1}, 256), Greedy)
    sample = strategy_for(BASE, {"temperature": 0.7, "seed": 3, "max_length": 20}, 256)
    assert isinstance(sample, Sample)
    assert (sample.temperature, sample.seed, sample.max_length) == (0.7, 3, 20)
    # the model's own beam keeps its length penalty when only the width changes
    own = DecodeConfig.of(make_call("decode", "beam", width=3, length_penalty=0.2))
    wider = strategy_for(own, {"beam": 5}, 256)
    assert isinstance(wider, Beam) and (wider.width, wider.length_penalty) == (5, 0.2)


def test_a_speech_models_voice_warp_stays_whatever_the_search() -> None:
    """The warp normalises the audio before any search: a request for another beam (or for
    greedy, beam 1) keeps it."""
    warp = make_call("warp", "voice_warp", factors=[0.9, 1.0, 1.1], by="")
    own = DecodeConfig.of(make_call("decode", "beam", width=8, warp=warp))
    for params in ({}, {"beam": 4}, {"beam": 1}):
        asked = strategy_for(own, params, 256)
        assert isinstance(asked, Beam | Greedy) and asked.warp == own.warp, params  # type: ignore[attr-defined]
    assert isinstance(strategy_for(own, {"beam": 1}, 256), Greedy)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"beams": 4}, "parameters.beams"),
        ({"beam": 0}, "parameters.beam"),
        ({"beam": "4"}, "parameters.beam"),
        ({"beam": True}, "parameters.beam"),
        ({"temperature": 0}, "parameters.temperature"),
        ({"temperature": float("nan")}, "parameters.temperature"),
        ({"top_p": 1.5}, "parameters.top_p"),
        ({"max_length": 300}, "parameters.max_length"),
        ({"length_penalty": 0.6}, "parameters.length_penalty"),
        ({"beam": 4, "temperature": 0.5}, "parameters"),
    ],
)
def test_a_wrong_option_is_a_400_naming_it(params: dict, field: str) -> None:
    with pytest.raises(ServeError) as e:
        strategy_for(BASE, params, 256)
    assert e.value.status == 400 and e.value.field == field, e.value.message


def test_scores_that_json_cannot_carry_become_null() -> None:
    assert json_number(float("nan")) is None and json_number(float("-inf")) is None
    assert score_tensor([-1.5, None, float("inf")])["data"] == [-1.5, None, None]
