"""Warm starts (`train.init_from`, `seqc.run.train.warm_start`): real checkpoints of both backends,
loaded into a small model by the map's patterns; every mistake in the map is an error at the
spec line that names what it found, never a traceback nor a half-loaded model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from seqc.backends import registry
from seqc.backends.api import Weights
from seqc.backends.weights import write_weights
from seqc.compiler.compile import compile_task
from seqc.compiler.graph import Param
from seqc.resolve.experiment import ResolvedExperiment, resolve
from seqc.resolve.program import load_program
from seqc.run.train.warm_start import WarmStart, warm_start
from seqc.spec.errors import CheckError, FileError

VOCAB, D = 10, 8

SPEC = """seqc 1
input tiny {
  train = text("train.txt")
  tokenizer = chars()
}
model LM(vocab: int, d: int = 8) {
  embed = Embedding(vocab, d)
  encoder = repeat(2) FeedForward(d, 2 * d)
  out = Softmax(vocab, d)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {
    return out(encoder(embed(ids)))
  }
}
task lm {
  input = tiny
  model = LM(vocab = input.vocab_size, d = D)
  loss = cross_entropy()
}
experiment tiny {
  tasks = [lm]
  train {
    steps = 5
    INIT
  }
}
"""
INIT_LINE = SPEC.splitlines().index("    INIT") + 1

ENCODER = {
    "0.w1.w": (D, 2 * D),
    "0.w1.b": (2 * D,),
    "0.w2.w": (2 * D, D),
    "0.w2.b": (D,),
    "1.w1.w": (D, 2 * D),
    "1.w1.b": (2 * D,),
    "1.w2.w": (2 * D, D),
    "1.w2.b": (D,),
}
SAME = (
    {"embed.table": (VOCAB, D)}
    | {f"encoder.{k}": s for k, s in ENCODER.items()}
    | {"out.w": (D, VOCAB), "out.b": (VOCAB,)}
)
"""The model's own params: a run of the same spec."""
RENAMED = {"embed.table": (VOCAB, D), "head.w": (D, 3)} | {
    f"enc.{k}": s for k, s in ENCODER.items()
}
"""Another model's: its encoder under another name, and a head the model lacks."""

BACKENDS = ["jax", "tf"]


def values(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


def checkpoint(run: Path, backend: str, shapes: dict, step: int = 3, seed: int = 0) -> Path:
    """A run directory holding a weights-only checkpoint of `backend`."""
    weights = Weights(backend, step, values(shapes, seed), run, False)
    write_weights(weights, run / "checkpoints", backend)
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """(backend, "same" | "renamed") -> a run directory, written once for the module."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for backend in BACKENDS:
        out[backend, "same"] = checkpoint(root / f"{backend}-same", backend, SAME)
        out[backend, "renamed"] = checkpoint(root / f"{backend}-renamed", backend, RENAMED)
    return out


def experiment(folder: Path, init: str, d: int = D) -> tuple[ResolvedExperiment, dict[str, Param]]:
    """The spec with `init` as its train block's line, resolved and compiled."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "lm.seq"
    spec.write_text(SPEC.replace("INIT", init).replace("d = D", f"d = {d}"))
    program = load_program(spec)
    resolved = resolve(program, "tiny", symbols={"tiny.vocab_size": VOCAB})
    return resolved, compile_task(program, resolved, resolved.tasks[0]).graph.params


def start(folder: Path, init: str, d: int = D) -> WarmStart | None:
    return warm_start(*experiment(folder, init, d))


# ------------------------------------------------------------------------------ loading


def test_no_init_from_is_a_fresh_start(tmp_path: Path) -> None:
    assert start(tmp_path, "seed = 1") is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_default_map_loads_every_tensor_by_its_name(
    tmp_path: Path, runs: dict, backend: str
) -> None:
    run = runs[backend, "same"]
    got = start(tmp_path, f'init_from = checkpoint("{run}")')
    assert got is not None
    assert got.fresh == []
    assert sorted(got.given) == sorted(SAME)
    assert got.loaded == [(n, n) for n in sorted(SAME)]
    want = values(SAME, 0)
    for name, value in got.given.items():
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, want[name])
    assert (got.backend, got.step) == (backend, 3)
    assert got.source == f"checkpoint 3 at {run / 'checkpoints'}"
    assert "11 of 11 params loaded" in got.summary()
    assert '"*" -> "*": 11 tensors' in got.summary()
    record = json.loads(json.dumps(got.record()))
    assert record["step"] == 3 and record["backend"] == backend and record["fresh"] == []
    assert record["map"] == [{"from": "*", "to": "*", "tensors": 11}]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pattern_renames_and_the_rest_is_fresh(tmp_path: Path, runs: dict, backend: str) -> None:
    run = runs[backend, "renamed"]
    got = start(tmp_path, f'init_from = checkpoint("{run}", map = {{"enc.*": "encoder.*"}})')
    assert got is not None
    assert got.loaded == [(f"enc.{k}", f"encoder.{k}") for k in sorted(ENCODER)]
    assert got.fresh == ["embed.table", "out.w", "out.b"]
    want = values(RENAMED, 0)
    np.testing.assert_array_equal(got.given["encoder.1.w2.w"], want["enc.1.w2.w"])
    summary = got.summary()
    assert "8 of 11 params loaded" in summary
    assert '"enc.*" -> "encoder.*": 8 tensors' in summary
    assert "3 params initialised fresh: embed.table, out.* (2)" in summary


def test_entries_apply_in_order_and_stars_capture_in_order(tmp_path: Path, runs: dict) -> None:
    run = runs["jax", "renamed"]
    got = start(
        tmp_path,
        f'init_from = checkpoint("{run}", map = {{"enc.*.w1.*": "encoder.*.w1.*", '
        f'"embed.table": "embed.table"}})',
    )
    assert got is not None
    assert got.loaded == [
        ("enc.0.w1.b", "encoder.0.w1.b"),
        ("enc.0.w1.w", "encoder.0.w1.w"),
        ("enc.1.w1.b", "encoder.1.w1.b"),
        ("enc.1.w1.w", "encoder.1.w1.w"),
        ("embed.table", "embed.table"),
    ]
    # Half of each encoder layer is fresh: those are listed by name, whole layers as `out.*`.
    assert "encoder.0.w2.w" in got.fresh and "out.w" in got.fresh
    assert "encoder.0.w2.* (2), encoder.1.w2.* (2), out.* (2)" in got.summary()


def test_a_relative_path_is_found_in_the_current_directory_then_beside_the_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec_dir, elsewhere = tmp_path / "spec", tmp_path / "elsewhere"
    checkpoint(spec_dir / "runs" / "x", "jax", SAME, step=4)
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    got = start(spec_dir, 'init_from = checkpoint("runs/x")')
    assert got is not None and got.step == 4
    assert got.path == str((spec_dir / "runs" / "x" / "checkpoints").resolve())

    checkpoint(elsewhere / "runs" / "x", "jax", SAME, step=7)
    got = start(spec_dir, 'init_from = checkpoint("runs/x")')
    assert got is not None and got.step == 7  # the current directory comes first


def test_step_names_an_older_checkpoint(tmp_path: Path) -> None:
    run = checkpoint(tmp_path / "run", "jax", SAME, step=2, seed=1)
    # A second step in the same folder: the backend's own writer (`write_weights` wants a new one).
    newer = Weights("jax", 5, values(SAME, 2), run, False)
    registry.backend("jax").write_weights(newer, run / "checkpoints")
    newest = start(tmp_path / "a", f'init_from = checkpoint("{run}")')
    older = start(tmp_path / "b", f'init_from = checkpoint("{run}", step = 2)')
    assert newest is not None and older is not None
    assert (newest.step, older.step) == (5, 2)
    np.testing.assert_array_equal(older.given["out.b"], values(SAME, 1)["out.b"])
    np.testing.assert_array_equal(newest.given["out.b"], values(SAME, 2)["out.b"])


# ------------------------------------------------------------------------------ errors


def test_a_key_that_matches_nothing_is_an_error_at_the_spec_line(
    tmp_path: Path, runs: dict
) -> None:
    run = runs["jax", "renamed"]
    with pytest.raises(CheckError) as e:
        start(tmp_path, f'init_from = checkpoint("{run}", map = {{"encoder.*": "encoder.*"}})')
    err = e.value
    assert err.code == "no-match"
    assert err.span is not None and err.span.line == INIT_LINE
    assert err.span.file == str(tmp_path / "lm.seq")
    assert '"encoder.*"' in err.message and str(run / "checkpoints") in err.message
    assert err.found is not None and "enc.0.w1.b" in err.found and "10 tensors" in err.found
    assert err.suggestion == "enc.*"
    assert f"lm.seq:{INIT_LINE}:" in str(err)


def test_a_destination_the_model_lacks_is_an_error(tmp_path: Path, runs: dict) -> None:
    run = runs["tf", "renamed"]
    with pytest.raises(CheckError) as e:
        start(tmp_path, f'init_from = checkpoint("{run}")')
    err = e.value
    assert err.code == "not-in-model"
    assert err.span is not None and err.span.line == INIT_LINE
    assert "`enc.0.w1.b` -> `enc.0.w1.b`" in err.message
    assert "... and 1 more" in err.message  # nine of them (`head.w` too), eight shown


def test_a_param_reached_by_two_entries_is_an_error_naming_both(tmp_path: Path, runs: dict) -> None:
    run = runs["jax", "renamed"]
    with pytest.raises(CheckError) as e:
        start(
            tmp_path,
            f'init_from = checkpoint("{run}", map = {{"enc.*": "encoder.*", '
            f'"enc.0.*": "encoder.0.*"}})',
        )
    assert e.value.code == "loaded-twice"
    assert '(entry "enc.*": "encoder.*")' in e.value.message
    assert '(entry "enc.0.*": "encoder.0.*")' in e.value.message


def test_shapes_that_differ_are_all_named_with_both_shapes(tmp_path: Path, runs: dict) -> None:
    run = runs["jax", "same"]
    with pytest.raises(CheckError) as e:
        start(tmp_path, f'init_from = checkpoint("{run}")', d=4)
    err = e.value
    assert err.code == "shape-mismatch"
    assert err.span is not None and err.span.line == INIT_LINE
    assert "checkpoint tensor `embed.table` is [10, 8], model param `embed.table` is [10, 4]" in (
        err.message
    )
    assert "... and 2 more" in err.message  # all but `out.b` differ: ten, eight shown


def test_stars_must_pair_up(tmp_path: Path, runs: dict) -> None:
    run = runs["jax", "renamed"]
    with pytest.raises(CheckError) as e:
        start(tmp_path, f'init_from = checkpoint("{run}", map = {{"enc.*": "encoder"}})')
    err = e.value
    assert err.code == "bad-pattern"
    assert err.span is not None and err.span.line == INIT_LINE
    assert "1 `*` in the checkpoint's pattern and 0 in the model's" in err.message


def test_a_missing_path_is_named_with_where_it_was_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileError) as e:
        start(tmp_path / "spec", 'init_from = checkpoint("runs/nowhere")')
    err = e.value
    assert err.code == "no-checkpoint"
    assert err.span is not None and err.span.line == INIT_LINE
    assert '"runs/nowhere"' in err.message
    assert str(tmp_path / "runs" / "nowhere") in err.message
    assert str(tmp_path / "spec" / "runs" / "nowhere") in err.message


def test_a_folder_without_a_checkpoint_gets_the_spec_line(tmp_path: Path) -> None:
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    with pytest.raises(FileError) as e:
        start(tmp_path, f'init_from = checkpoint("{tmp_path / "empty"}")')
    err = e.value
    assert err.code == "no-checkpoint"
    assert err.span is not None and err.span.line == INIT_LINE
    assert str(tmp_path / "empty") in err.message


def test_a_missing_step_is_named(tmp_path: Path, runs: dict) -> None:
    run = runs["tf", "same"]
    with pytest.raises(FileError) as e:
        start(tmp_path, f'init_from = checkpoint("{run}", step = 9)')
    err = e.value
    assert err.code == "no-checkpoint"
    assert err.span is not None and err.span.line == INIT_LINE
    assert "step 9" in err.message and str(run) in err.message
    assert err.found is not None and err.found.startswith("steps ")
    assert err.hint is not None and "--resume" not in err.hint
