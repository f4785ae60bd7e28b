"""Weights by layer path, read from and written to either backend's checkpoints.

Why a module of its own: a checkpoint written by JAX (orbax) loads in TF and the other way
round, tensor by tensor, by layer path (`blocks.0.attn.q.w`), without building either model.
`read_weights` finds the format from the files (orbax writes numbered folders, TF writes a
`checkpoint` state file and `ckpt-N.index`), `write_weights` writes a weights-only checkpoint
in either format (`seqc convert`), and `match_params` checks weights against a model's op
graph, naming the tensor and both shapes on a mismatch.

Only weights and the step cross backends: the optimizer's state is laid out differently by
optax and by the TF backend, so a converted checkpoint serves eval, decode and export, and a
run resumes only from a checkpoint of its own backend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqc.compiler.graph import Graph
from seqc.spec.errors import FileError

NAMES = {"jax": "JAX", "tf": "TensorFlow"}


@dataclass
class Weights:
    backend: str
    step: int
    params: dict[str, np.ndarray]
    path: Path
    full_state: bool
    """True when the checkpoint holds the optimizer state too (a run can resume from it)."""


def checkpoint_dir(path: Path) -> Path:
    """The checkpoints folder of a run directory, or the folder itself."""
    return path / "checkpoints" if (path / "checkpoints").is_dir() else path


def detect(directory: Path) -> str:
    """`jax` or `tf`: which backend wrote the checkpoints in this folder."""
    if not directory.is_dir():
        raise FileError(
            f"no checkpoints at {directory}",
            path=str(directory),
            code="no-checkpoint",
            hint="give a run directory or its checkpoints folder; train first if there is none",
        )
    if (directory / "checkpoint").is_file() or any(directory.glob("*.index")):
        return "tf"
    if any(p.is_dir() and p.name.isdigit() for p in directory.iterdir()):
        return "jax"
    raise FileError(
        f"{directory} holds no checkpoint of either backend",
        path=str(directory),
        code="no-checkpoint",
        hint="expected numbered folders (JAX, orbax) or ckpt-N.index files (TF)",
    )


def read_weights(path: Path, step: int | None = None) -> Weights:
    directory = checkpoint_dir(path)
    backend = detect(directory)
    reader = _read_tf if backend == "tf" else _read_jax
    return reader(directory.resolve(), step)


def _bad(path: Path, e: Exception, step: int) -> FileError:
    first = (str(e).strip().splitlines() or [""])[0]
    return FileError(
        f"checkpoint {step} at {path} cannot be read: {type(e).__name__}: {first}",
        path=str(path),
        code="bad-checkpoint",
        hint="it may be corrupt or not a seqc checkpoint; delete it to fall back to an older one",
    )


def _read_jax(directory: Path, step: int | None) -> Weights:
    import orbax.checkpoint as ocp

    manager = ocp.CheckpointManager(directory)
    step = manager.latest_step() if step is None else step
    if step is None:
        raise FileError(f"no checkpoint in {directory}", path=str(directory), code="no-checkpoint")
    try:
        tree = manager.restore(step, args=ocp.args.StandardRestore())
    except Exception as e:  # orbax raises many kinds; all mean the same to a user
        raise _bad(directory / str(step), e, step) from None
    finally:
        manager.close()
    if not isinstance(tree, dict) or not isinstance(tree.get("params"), dict):
        raise _bad(directory / str(step), ValueError("no `params` in the saved tree"), step)
    params = {k: np.asarray(v) for k, v in tree["params"].items()}
    return Weights("jax", step, params, directory, "opt_state" in tree)


_TF_KEY = re.compile(r"^params/(.+)/\.ATTRIBUTES/VARIABLE_VALUE$")


def _unescape(name: str) -> str:
    """TF's object-graph escaping: `.` is written `..` and `/` is written `.S`."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "." and i + 1 < len(name):
            out.append("/" if name[i + 1] == "S" else name[i + 1])
            i += 2
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def _read_tf(directory: Path, step: int | None) -> Weights:
    import tensorflow as tf

    from seqc.backends.tf.checkpoint import PREFIX

    if step is None:
        latest = tf.train.latest_checkpoint(str(directory))
        if latest is None:
            raise FileError(
                f"no checkpoint in {directory}", path=str(directory), code="no-checkpoint"
            )
        step = int(latest.rsplit("-", 1)[1])
    prefix = directory / f"{PREFIX}-{step}"
    try:
        reader = tf.train.load_checkpoint(str(prefix))
        keys = reader.get_variable_to_shape_map()
        params = {
            _unescape(m.group(1)): np.asarray(reader.get_tensor(k))
            for k in keys
            if (m := _TF_KEY.match(k))
        }
    except Exception as e:
        raise _bad(prefix, e, step) from None
    if not params:
        raise _bad(prefix, ValueError("no `params/...` variables in it"), step)
    full = any(k.startswith("opt/") for k in keys)
    return Weights("tf", step, params, directory, full)


def write_weights(weights: Weights, directory: Path, backend: str) -> Path:
    """A weights-only checkpoint (params and step) in `backend`'s format, at `directory`."""
    if directory.exists() and any(directory.iterdir()):
        raise FileError(
            f"{directory} is not empty",
            path=str(directory),
            code="exists",
            hint="choose a new folder for the converted checkpoint",
        )
    if backend == "jax":
        import orbax.checkpoint as ocp

        options = ocp.CheckpointManagerOptions(create=True)
        manager = ocp.CheckpointManager(directory.resolve(), options=options)
        tree = {"params": weights.params, "step": np.asarray(weights.step, np.int32)}
        manager.save(weights.step, args=ocp.args.StandardSave(tree), force=True)
        manager.wait_until_finished()
        manager.close()
        return directory
    import tensorflow as tf

    from seqc.backends.tf.checkpoint import PREFIX

    variables = {k: tf.Variable(v, name=k) for k, v in weights.params.items()}
    ckpt = tf.train.Checkpoint(params=variables, step=tf.Variable(weights.step, dtype=tf.int32))
    manager = tf.train.CheckpointManager(ckpt, str(directory), 1, checkpoint_name=PREFIX)
    manager.save(checkpoint_number=weights.step)
    return directory


def match_params(graph: Graph, weights: Weights) -> dict[str, np.ndarray]:
    """The weights in the graph's param order, float32; every mismatch named with its shapes."""
    problems: list[str] = []
    for name, p in graph.params.items():
        want = tuple(int(d) for d in p.type.shape)
        got = weights.params.get(name)
        if got is None:
            problems.append(f"missing tensor `{name}` (the model expects {list(want)})")
        elif tuple(got.shape) != want:
            problems.append(
                f"tensor `{name}` has shape {list(got.shape)}, the model expects {list(want)}"
            )
    extra = sorted(set(weights.params) - set(graph.params))
    problems += [f"unexpected tensor `{n}` {list(weights.params[n].shape)}" for n in extra]
    if problems:
        shown = problems[:8] + ([f"... and {len(problems) - 8} more"] if len(problems) > 8 else [])
        listed = "".join(f"\n  - {line}" for line in shown)
        raise FileError(
            f"the {NAMES[weights.backend]} checkpoint at {weights.path} (step {weights.step}) "
            f"does not fit this model:{listed}",
            path=str(weights.path),
            code="checkpoint-mismatch",
            hint="was it trained with another spec, experiment or --set? use the same ones",
        )
    return {n: np.asarray(weights.params[n], np.float32) for n in graph.params}
