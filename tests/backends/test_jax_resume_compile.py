"""A resumed JAX run steps with the program its fresh run compiled.

Why: a jitted function called on committed arrays (a restored checkpoint's are) is another
program than on uncommitted ones (`jnp.asarray`'s), so before the fresh state was committed too,
every resume compiled its train step again: in the same process (a sweep's worker, a test), and
against the compilation cache a sweep's trials share (3.8 of a tiny resume's 4.7 CPU-seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
from tiny_specs import spec_with

from seqc.backends.jax.checkpoint import Checkpoints
from seqc.backends.jax.train import JaxModel
from seqc.compiler.compile import compile_task
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program


@dataclass
class Batch:
    arrays: dict[str, np.ndarray]


def test_a_restored_state_takes_the_fresh_run_s_compiled_step(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, "cross_entropy()")
    program = load_program(spec)
    task = compile_task(program, resolve(program, "tiny", ["lm.model.vocab=16"]), "lm")
    model = JaxModel(task, task.train, None)
    seq = (np.arange(8)[:, None] + np.arange(9)[None]) % 10
    batch = Batch({"inputs": seq[:, :-1], "targets": seq[:, 1:], "mask": seq[:, 1:] > 0})
    state = model.init(0)
    assert all(x.committed for x in jax.tree.leaves(state))  # as a restored state's are
    state, _ = model.train_step(state, batch, 1e-3)
    checkpoints = Checkpoints(tmp_path / "checkpoints", keep=2)
    checkpoints.save(1, state)
    restored = checkpoints.restore(model.init(0), 1)
    checkpoints.close()
    assert all(x.committed for x in jax.tree.leaves(restored))
    fresh, _ = model.train_step(restored, batch, 1e-3)
    assert model._train_step is not None
    assert model._train_step._cache_size() == 1  # one program for the fresh and the restored
    assert int(fresh["step"]) == 2
