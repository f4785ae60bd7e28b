"""Export with a parity gate: an artifact is kept only if it computes what the trained model does.

Each artifact is written to a temporary folder beside its target, loaded back the way a
deployment would load it, and run on batches of the spec's own dev data (train data when there
is no dev split) next to the model on both backends. Only when the largest difference is within
`PARITY_ATOL` is it renamed into place; otherwise the export fails and says by how much.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from seqc.backends import select
from seqc.backends.weights import Weights
from seqc.spec.errors import FileError, SeqcError

PARITY_ATOL = 1e-4
"""Largest |logit difference| an fp32 artifact may show against the trained model."""

PARITY_BATCHES = 4


class ExportError(SeqcError):
    phase = "export"


def _batches(session: Any, n: int) -> list[Any]:
    split = "dev" if "dev" in session.pipeline.splits else "train"
    out = []
    for i, batch in enumerate(session.pipeline.batches(split)):
        if i >= n:
            break
        out.append(batch)
    return out


def export_savedmodel_checked(
    session: Any, params: dict[str, np.ndarray], weights: Weights, target: Path
) -> dict[str, Any]:
    import tensorflow as tf

    from seqc.backends.tf.savedmodel import SIGNATURES, export_savedmodel

    if target.exists() and any(target.iterdir()):
        raise FileError(
            f"{target} already holds an export",
            path=str(target),
            code="exists",
            hint="choose another --out, or delete the old export",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".savedmodel-", dir=target.parent))
    try:
        manifest = {
            "experiment": session.resolved.name,
            "task": session.task,
            "task_kind": session.pipeline.task,
            "vocab_size": session.pipeline.vocab_size,
            "checkpoint": {"backend": weights.backend, "step": weights.step},
        }
        export_savedmodel(session.graph, params, tmp, manifest)
        loaded = tf.saved_model.load(str(tmp))
        serve = loaded.signatures["logits"]
        models = {
            b: select.make_model(b, session.graph, session.task_config, session.train_config)
            for b in select.BACKENDS
        }
        states = {b: select.with_params(b, m, params) for b, m in models.items()}
        errs = {b: 0.0 for b in select.BACKENDS}
        batches = _batches(session, PARITY_BATCHES)
        for batch in batches:
            feeds = models["tf"].inputs(batch.arrays)
            got = serve(**{k: tf.convert_to_tensor(v) for k, v in feeds.items()})["logits"]
            got = got.numpy()
            for b, m in models.items():
                want = np.asarray(m.logits(states[b]["params"], dict(batch.arrays)))
                errs[b] = max(errs[b], float(np.max(np.abs(got - want))))
        worst = max(errs.values())
        if worst > PARITY_ATOL:
            raise ExportError(
                f"the SavedModel's logits differ from the trained model's by {worst:.3g} "
                f"(allowed {PARITY_ATOL}); nothing was written",
                path=str(target),
                code="parity-failed",
            )
        if target.exists():
            target.rmdir()
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return {
        "path": target,
        "signatures": SIGNATURES,
        "max_abs_err_tf": errs["tf"],
        "max_abs_err_jax": errs["jax"],
        "batches": len(batches),
    }
