"""Resolution: `extends` chains, overrides, provenance, defaults, freezing, layer instances."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.resolve.values import CallValue, Symbol
from seqc.spec.errors import SeqcError

ROOT = Path(__file__).resolve().parents[2]
LM = ROOT / "examples" / "lm" / "shakespeare.seq"
MT = ROOT / "examples" / "mt" / "bible_transformer.seq"
LSTM = ROOT / "examples" / "mt" / "lstm_attention.seq"

BASE = """seqc 1
input data {
  train = text("train.txt")
  tokenizer = chars()
}
layer Cell(d: int, ff: int = 2 * d) {
  lin = Linear(d, ff)
  forward (x: float32[B, T, d]) -> float32[B, T, ff] {
    return lin(x)
  }
}
model M(vocab: int, d: int = 8, n: int = 2) {
  embed = Embedding(vocab, d)
  cells = repeat(n) Cell(d)
  out = Softmax(vocab, 2 * d, tie = embed)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {
    return out(cells(embed(ids)))
  }
}
task t {
  input = data
  model = M(vocab = input.vocab_size)
}
experiment a {
  tasks = [t]
  train { steps = 10; optimizer = sgd(lr = 0.1, momentum = 0.9) }
}
experiment a.b extends a {
  t.model.d = 16
  train.steps = 20
}
experiment a.b.c extends a.b {
  train.optimizer.lr = 0.5
  t.input.tokenizer = sentencepiece(vocab_size = 300)
}
"""


@pytest.fixture
def program(tmp_path: Path):
    spec = tmp_path / "base.seq"
    spec.write_text(BASE)
    return load_program(spec)


def test_extends_chain_applies_root_first(program) -> None:
    r = resolve(program, "a.b.c")
    assert r.chain == ("a.b.c", "a.b", "a")
    assert r.get("train.steps") == 20
    assert r.get("train.optimizer.lr") == 0.5
    assert r.get("train.optimizer.momentum") == 0.9  # set by `a`, kept through the chain
    assert r.get("t.model.d") == 16


def _at(text: str) -> str:
    """`base.seq:line:col` of the first occurrence of `text` in BASE."""
    before = BASE[: BASE.index(text)]
    return f"base.seq:{before.count(chr(10)) + 1}:{len(before) - before.rfind(chr(10))}"


def test_provenance_names_the_line_default_or_override(program) -> None:
    r = resolve(program, "a.b.c", ["train.steps=99"])
    assert str(r.origin("train.steps")) == "--set train.steps=99"
    assert str(r.origin("train.optimizer.lr")).endswith(_at("train.optimizer.lr = 0.5"))
    assert _at("train.optimizer.lr = 0.5") == "base.seq:33:3"
    assert str(r.origin("train.optimizer.momentum")).endswith(_at("optimizer = sgd"))
    assert str(r.origin("train.optimizer.nesterov")) == "default"
    assert str(r.origin("t.model.d")).endswith(_at("t.model.d = 16"))
    assert r.origin("train.seed").kind == "default"


def test_default_computed_from_an_overridden_param(program) -> None:
    r = resolve(program, "a.b")
    cell = r.models["t"].children[1].children[0]
    assert cell.path == "cells.0"
    assert cell.args == {"d": 16, "ff": 32}
    assert r.models["t"].children[1].repeat == 2


def test_vocab_size_known_from_tokenizer_or_symbolic(program) -> None:
    assert resolve(program, "a.b.c").get("t.model.vocab") == 300
    vocab = resolve(program, "a").get("t.model.vocab")
    assert isinstance(vocab, Symbol) and vocab.ref == "data.vocab_size"


def test_overrides_are_type_checked(program) -> None:
    with pytest.raises(SeqcError) as e:
        resolve(program, "a", ["train.steps=1.5"])
    assert e.value.code == "wrong-type"
    with pytest.raises(SeqcError) as e:
        resolve(program, "a", ["t.model.dd=3"])
    assert e.value.code == "unknown-param" and e.value.suggestion == "d"
    with pytest.raises(SeqcError) as e:
        resolve(program, "a", ["train.optimizer=adamm(lr = 1)"])
    assert e.value.code == "unknown-kind" and e.value.suggestion == "adam"


def test_override_replaces_a_whole_call_and_resets_its_defaults(program) -> None:
    r = resolve(program, "a", ["train.optimizer=adam(lr = 0.01)"])
    opt = r.get("train.optimizer")
    assert isinstance(opt, CallValue) and opt.kind == "adam"
    assert opt.args["lr"] == 0.01
    assert r.origin("train.optimizer.beta1").kind == "default"


def test_bare_words_on_the_command_line_are_strings(program) -> None:
    r = resolve(program, "a", ["train.compute_dtype=bfloat16", "backend=tf"])
    assert r.get("train.compute_dtype") == "bfloat16"
    assert r.get("backend") == "tf"


def test_resolved_experiment_is_frozen(program) -> None:
    r = resolve(program, "a")
    with pytest.raises(TypeError):
        r.config["train"]["steps"] = 5
    with pytest.raises(TypeError):
        r.get("train.optimizer").args["lr"] = 5
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its own ValidationError
        r.name = "other"  # type: ignore[misc]


def test_examples_resolve() -> None:
    r = resolve(load_program(LM), "lm.shakespeare.small")
    assert r.get("lm.model.d") == 512
    assert r.get("lm.model.vocab") == 4000
    devices = r.get("distribution.devices")
    assert len(devices) == 4 and {d.kind for d in devices} == {"cpu"}
    assert [f.kind for f in r.get("export.formats")] == ["onnx", "tflite"]
    smoke = resolve(load_program(MT), "mt.bible.transformer.smoke")
    assert smoke.get("translate.model.vocab") == 1000
    assert len(smoke.models["translate"].children[3].children) == 1
    lstm = resolve(load_program(LSTM), "mt.bible.lstm")
    enc = next(c for c in lstm.models["translate_lstm"].children if c.path == "encoder")
    assert enc.args["bidirectional"] is True


def test_registry_spans_imports() -> None:
    program = load_program(LSTM)
    assert set(program.experiments) == {
        "mt.bible.lstm",
        "mt.bible.transformer",
        "mt.bible.transformer.base",
        "mt.bible.transformer.cpu",
        "mt.bible.transformer.smoke",
    }
    assert "EncoderBlock" in program.layers  # two imports deep
