"""The study a sweep opens: its storage, what it remembers, and the engine parts it is given."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from conftest import sweep_spec

from seqc.resolve.program import load_program
from seqc.resolve.sweep import ResolvedSweep, resolve_sweep, trial_overrides
from seqc.run.sweep import engine, study
from seqc.spec.errors import FileError, UsageError

optuna.logging.set_verbosity(optuna.logging.ERROR)


@pytest.fixture
def sweeps(tmp_path: Path) -> dict[str, ResolvedSweep]:
    program = load_program(sweep_spec(tmp_path))
    return {n: resolve_sweep(program, n) for n in ("tiny.lr", "tiny.bad")}


def test_a_study_remembers_its_search_and_refuses_another(tmp_path: Path, sweeps) -> None:
    storage = study.open_storage(None, tmp_path / "s")
    first = study.open_study(sweeps["tiny.lr"], storage)
    assert first.user_attrs["experiment"] == "tiny.evals"
    again = study.open_study(sweeps["tiny.lr"], study.open_storage(None, tmp_path / "s"))
    assert again.study_name == "tiny.lr"
    changed = sweeps["tiny.lr"].model_copy(update={"space": sweeps["tiny.bad"].space})
    with pytest.raises(UsageError) as e:
        study.open_study(changed, storage)
    assert e.value.code == "sweep-changed" and "space" in e.value.message


def test_a_bad_storage_is_a_located_error_with_the_password_hidden(tmp_path: Path) -> None:
    with pytest.raises(FileError) as e:
        study.open_storage("nosuchdb://me:secret@localhost/x", tmp_path)
    assert e.value.code == "sweep-storage"
    assert "secret" not in e.value.render() and "me:***@localhost" in e.value.render()
    junk = tmp_path / "junk.journal"
    junk.write_bytes(b"\x00\xffnot a journal\n")
    with pytest.raises(FileError) as e:
        study.load_study("x", study.open_storage(str(junk), tmp_path))
    assert e.value.code in ("sweep-storage", "sweep-missing")


def test_samplers_and_pruners_are_optunas(sweeps) -> None:
    lr, bad = sweeps["tiny.lr"], sweeps["tiny.bad"]
    assert isinstance(engine.sampler(lr), optuna.samplers.RandomSampler)
    assert isinstance(engine.pruner(lr), optuna.pruners.NopPruner)
    grid = engine.sampler(bad, salt=99)
    assert isinstance(grid, optuna.samplers.GridSampler)
    assert engine.grid_space(bad.space) == {"train.optimizer.lr.peak": [1e-08, 0.02, 1e-07]}
    assert isinstance(engine.pruner(bad), optuna.pruners.MedianPruner)
    asha = bad.model_copy(
        update={
            "pruner": bad.pruner.model_copy(
                update={"kind": "asha", "args": {"min_steps": 100, "reduction": 3}}
            )
        }
    )
    assert isinstance(engine.pruner(asha), optuna.pruners.SuccessiveHalvingPruner)


def test_a_trial_s_values_become_overrides_the_resolver_reads_back(tmp_path: Path, sweeps) -> None:
    from seqc.resolve.experiment import resolve

    program = load_program(sweep_spec(tmp_path / "again"))
    lr = sweeps["tiny.lr"]
    for value in (0.003, 0.0123456789012345, 0.03):
        (text,) = trial_overrides(lr, {"train.optimizer.lr.peak": value})
        resolved = resolve(program, lr.experiment, [text])
        assert resolved.get("train.optimizer.lr.peak") == value
