"""The candidate words of a sampled loss, drawn for each training step and added to its batch.

Why on the host and with the batch: the draw is a function of (seed, step) only
(`seqc.data.proposal.Proposal.draw`), so a resumed run draws what an uninterrupted one drew,
every process of a data-parallel run draws the same set, and both backends get the same numbers
(their parity is tested with them). The arrays the criterion reads
(`seqc.compiler.lower.sampled`): the K ids and their log expected counts, repeated in every row
so that any split of the batch's rows hands each device the whole set (a [rows, K] int32 array:
128 KiB at 32 rows and K = 1024), and each target's log expected count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from seqc.compiler.compile import CompiledTask
from seqc.compiler.lower.sampled import CANDIDATES, CANDIDATES_LOG_E, LABELS_LOG_E, variant
from seqc.data.batch import Batch
from seqc.data.pipeline import InputPipeline
from seqc.data.proposal import Proposal, make, order_warning


class Candidates:
    """Adds a step's candidates to its batch."""

    def __init__(self, proposal: Proposal, k: int, seed: int, labels: str) -> None:
        self.proposal, self.k, self.seed, self.labels = proposal, k, seed, labels

    def initial(self, task: CompiledTask) -> dict[str, np.ndarray]:
        """Params a fresh run starts from instead of their initializer's: for the
        self-normalising criteria (NCE, SNIS B), the output bias at log Q, so that
        exp(s) / Q = 1 for every word at the start (s = h.w + b, h.w near 0): the importance
        weights start equal (no heavy tail to blow up the first steps) and the model starts
        normalised (../shared/research/snis.md, SNIS B's risk). The shift-invariant sampled
        softmax (SNIS A) does not need it and keeps the initializer's zeros."""
        head = task.graph.head
        if head is None or head.bias is None or variant(task.config["loss"]) == "softmax":
            return {}
        return {head.bias: self.proposal.log_q.astype(np.float32)}

    def attach(self, batch: Batch, step: int) -> Batch:
        ids = self.proposal.draw(self.seed, step, self.k)
        rows = batch.arrays[self.labels].shape[0]
        log_e = self.proposal.log_expected(ids, self.k)
        arrays = dict(batch.arrays)
        arrays[CANDIDATES] = np.broadcast_to(ids, (rows, self.k)).copy()
        arrays[CANDIDATES_LOG_E] = np.broadcast_to(log_e, (rows, self.k)).copy()
        arrays[LABELS_LOG_E] = self.proposal.log_expected(batch.arrays[self.labels], self.k)
        return dataclasses.replace(batch, arrays=arrays)


def candidates_for(
    task: CompiledTask,
    pipeline: InputPipeline,
    seed: int,
    warn: Callable[[str], None] | None = None,
) -> Candidates | None:
    """The candidates of `task`'s loss, or None when it is not a sampled one. `warn(text)` is
    told when a `log_uniform` proposal meets ids that are not sorted by frequency."""
    if not task.sampled:
        return None
    loss = task.config["loss"]
    call = loss.args["proposal"]
    head = task.graph.head
    assert head is not None  # compile_task checked it
    vocab = int(task.graph.ops[head.logits].type.shape[-1])
    counts = None
    if call.kind in ("unigram", "log_uniform"):
        counts = pipeline.target_counts()
        counts = np.pad(counts, (0, max(vocab - len(counts), 0)))[:vocab]
    if call.kind == "log_uniform" and warn is not None:
        why = order_warning(counts)
        if why:
            warn(why)
    power = float(call.args.get("power", 0.75))
    proposal = make(call.kind, vocab, counts, power)
    return Candidates(proposal, int(loss.args["samples"]), seed, task.labels[0])
