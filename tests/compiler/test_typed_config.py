"""The typed config at the backend contract (`seqc.compiler.config`) against the catalogue.

Why: the catalogue is the only table of defaults; the dataclasses have none and read every field
from the resolved spec. So each kind's dataclass must have exactly the kind's params (a param
added to the catalogue without its field, or a field the catalogue lacks, fails here), and what
`compile_task` builds must hold the catalogue's defaults where the spec says nothing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from seqc.compiler.compile import compile_task
from seqc.compiler.config import (
    KINDS,
    Adam,
    Beam,
    DecodeConfig,
    FromCheckpoint,
    Greedy,
    OptimizerConfig,
    Sgd,
    TrainConfig,
    VoiceWarp,
    WarmupRsqrt,
)
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.resolve.values import CallValue
from seqc.spec.kinds import REGISTRY

NAMESPACES = ("optimizer", "schedule", "decode", "init")

SPEC = """seqc 1
input data { train = text("t.txt"); tokenizer = chars() }
model M(vocab: int) {
  embed = Embedding(vocab, 8)
  out = Softmax(vocab, 8)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] { return out(embed(ids)) }
}
task lm { input = data; model = M(vocab = 12); decode = beam(3) }
experiment e {
  tasks = [lm]
  train { optimizer = sgd(lr = warmup_rsqrt(0.1, 10), momentum = 0.9); steps = 7 }
}
"""


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_every_kind_has_a_dataclass_of_its_params(namespace: str) -> None:
    assert set(KINDS[namespace]) == set(REGISTRY.names(namespace))
    for kind, cls in KINDS[namespace].items():
        spec = REGISTRY.get(namespace, kind)
        assert spec is not None
        assert _fields(cls) == {p.name for p in spec.params}, kind


def test_the_train_config_has_every_field_of_the_train_block() -> None:
    spec = REGISTRY.get("block", "train")
    assert spec is not None
    assert _fields(TrainConfig) == {p.name for p in spec.params}


def test_compile_task_types_the_train_block_and_the_decode(tmp_path: Path) -> None:
    """Given values are read as written, the rest are the catalogue's defaults: the resolver
    filled them in, nothing in code did."""
    path = tmp_path / "e.seq"
    path.write_text(SPEC)
    program = load_program(path)
    resolved = resolve(program, "e")
    task = compile_task(program, resolved, "lm")
    train, block = task.train, REGISTRY.get("block", "train")
    assert block is not None
    assert train.optimizer == Sgd(
        lr=WarmupRsqrt(peak=0.1, warmup=10), momentum=0.9, nesterov=False, weight_decay=0.0
    )
    assert train.optimizer.slots == 1
    assert train.steps == 7
    for name in ("clip_norm", "accumulate", "keep_checkpoints", "mix_by", "seed"):
        declared = block.param(name)
        assert declared is not None and getattr(train, name) == declared.default, name
    assert task.decode == Beam(max_length=64, width=3, length_penalty=0.6)


def test_a_call_of_an_unknown_kind_says_what_there_is() -> None:
    nucleus = CallValue(kind="nucleus", namespace="decode", args={"max_length": 4})
    with pytest.raises(ValueError, match="expected one of greedy, sample, beam"):
        DecodeConfig.of(nucleus)
    adam = CallValue(kind="adam", namespace="optimizer", args={})
    with pytest.raises(ValueError, match="decode `adam`"):
        DecodeConfig.of(adam)


def test_nothing_is_filled_in_for_a_missing_param() -> None:
    """A call missing a param is the caller's bug (resolve fills every one): a KeyError, not a
    default restated here."""
    with pytest.raises(KeyError, match="max_length"):
        DecodeConfig.of(CallValue(kind="greedy", namespace="decode", args={}))


def test_values_are_converted_to_their_declared_types() -> None:
    """An int where a float is declared becomes a float, a list a tuple, a nested call its
    dataclass: what the backends compute with does not depend on how a value was written."""
    adam = OptimizerConfig.of(
        CallValue(
            kind="adam",
            namespace="optimizer",
            args={
                "lr": 1,
                "beta1": 0.9,
                "beta2": 0.999,
                "eps": 1e-8,
                "weight_decay": 0,
                "lazy_rows": False,
            },
        )
    )
    assert isinstance(adam, Adam) and adam.slots == 2
    assert type(adam.lr) is float and type(adam.weight_decay) is float
    init = CallValue(
        kind="checkpoint", namespace="init", args={"path": "runs/x", "map": {"*": "*"}, "step": 3}
    )
    assert TrainConfig.of(
        {**_train_defaults(), "optimizer": adam_call(), "init_from": init}
    ).init_from == FromCheckpoint(path="runs/x", map={"*": "*"}, step=3)
    greedy = CallValue(kind="greedy", namespace="decode", args={"max_length": 5, "warp": None})
    assert Greedy.of(greedy) == Greedy(max_length=5)
    warp = CallValue(
        kind="voice_warp", namespace="warp", args={"factors": [1, 1.1], "by": "", "utterances": 3}
    )
    warped = Greedy.of(
        CallValue(kind="greedy", namespace="decode", args={"max_length": 5, "warp": warp})
    )
    assert warped.warp == VoiceWarp(factors=(1.0, 1.1), by="", utterances=3)
    assert type(warped.warp.factors[0]) is float


def adam_call() -> CallValue:
    spec = REGISTRY.get("optimizer", "adam")
    assert spec is not None
    return CallValue(
        kind="adam", namespace="optimizer", args={p.name: p.default for p in spec.params}
    )


def _train_defaults() -> dict[str, object]:
    spec = REGISTRY.get("block", "train")
    assert spec is not None
    return {p.name: p.default for p in spec.params}
