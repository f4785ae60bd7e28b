"""The chief's model of an asynchronous TF run: variables on the parameter servers, steps on
the workers.

`PsModel` is a `TfModel` whose variables (params, optimizer slots, step, seed) are created under
the `ParameterServerStrategy`'s scope, so they live on the servers (`seqc.backends.tf.ps`).
`train_step` schedules the step on a free worker with `ClusterCoordinator.schedule` and
returns at once; its metrics are read with `seqc.backends.api.fetch`, which waits for that
step. Each worker reads the variables as they are, computes its gradient and assigns its
update: there is no synchronisation between workers (Hogwild-style asynchrony: updates may
be computed on variables a step or two old).

How the workers get their batches: from the split's records on disk, each worker reading
its own steps' rows (`seqc.backends.tf.records`; `read_on_workers`). The chief still plans
every batch (bucketing, shuffling: a function of the seed and the step, as in a synchronous
run) and reads none of their ids (`local_rows` is (0, 0)); a scheduled step carries its
rows' byte offsets in the records, its bucket's length and any array the records do not
make, and the worker reads and pads the rows itself. The data order
stays the synchronous run's (batch i is step i's), and a failed worker's step, rerun on
another, reads the same rows. Without `read_on_workers` (a model used outside the training
loop, or a sampled loss, whose candidates the chief computes from the batch's ids), batches
travel with the step as the chief's tensors.

The step count is the number of scheduled steps, and a step's number is the one it was
scheduled as, not what a shared counter says when a worker runs it: dropout draws from the
run's seed with it folded in, and the optimizer's update count (Adam's bias correction) is set
to it. `PsCheckpoints` waits for every scheduled step before it saves, so a checkpoint is a
step boundary; it then sets the step and the update count to the steps scheduled (a step whose
worker died after its update was rerun elsewhere), and only the chief writes. Evaluation and
decoding on the chief read a local copy of the params taken at such a boundary.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends.api import MetricsLost, RowRecords
from seqc.backends.tf.checkpoint import TfCheckpoints
from seqc.backends.tf.ps import Link, translated
from seqc.backends.tf.records import WorkerRecords
from seqc.backends.tf.train import TfModel
from seqc.compiler.compile import CompiledTask
from seqc.compiler.config import TrainConfig
from seqc.spec.errors import DeviceError

METRICS = ("loss", "nll_sum", "tokens", "grad_norm")
"""What a worker sends back per step, as one float32 vector in this order (one copy)."""


class Metric:
    """One metric of a scheduled step; `np.asarray` waits for the step and fetches it (all of
    the step's metrics come back together, once)."""

    __slots__ = ("index", "remote")

    def __init__(self, remote: Any, index: int) -> None:
        self.remote, self.index = remote, index

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        try:
            with translated():
                values = self.remote.fetch()
        except (tf.errors.UnavailableError, tf.errors.CancelledError, tf.errors.AbortedError) as e:
            # Not a parameter server (`translated` raised those as its own error): the worker
            # that ran the step, and held its result, is gone. The update was applied.
            raise MetricsLost(f"the worker that ran this step was lost ({type(e).__name__})") from e
        return np.asarray(values[self.index], dtype=dtype)

    def __float__(self) -> float:
        return float(np.asarray(self))


class PsModel(TfModel):
    """A `TfModel` over variables on parameter servers, trained by scheduling steps on the
    workers (see the module's docstring)."""

    strategy = "parameter_server"

    def __init__(
        self,
        task: CompiledTask,
        train: TrainConfig,
        seed: int = 0,
        *,
        link: Link,
        jit_compile: bool = False,
    ) -> None:
        self.link = link
        with link.strategy.scope():  # every variable, slots and counters too, on the servers
            super().__init__(task, train, seed, jit_compile=jit_compile)
        self._worker_step = tf.function(
            self._worker_impl, autograph=False, reduce_retracing=True, jit_compile=jit_compile
        )
        self._next: int | None = None
        """The step the next scheduled one is (read from `step` after a restore)."""
        self._restores = link.restores
        self._local: dict[str, tf.Tensor] | None = None
        """The params copied to the chief at the last step boundary, for eval and decoding."""
        self._records: WorkerRecords | None = None
        """Where the workers read their batches (`read_on_workers`); None: from the step."""

    # ---------------------------------------------------------------- state
    def init_from(self, params: Mapping[str, Any]) -> None:
        super().init_from(params)
        self._next, self._local = 0, None

    def drain(self) -> None:
        """Wait for every scheduled step; then `step` and the update count are the steps
        scheduled (see `PsCheckpoints`)."""
        self.link.join()
        step = self._current()
        if step is not None:
            settle(self.state, step)

    def _current(self) -> int | None:
        """The next step's number, or None when no step was scheduled since a restore."""
        if self._restores != self.link.restores:
            self._restores, self._next, self._local = self.link.restores, None, None
        return self._next

    def local_params(self) -> dict[str, tf.Tensor]:
        """The params as tensors on the chief, copied once per step boundary (eval, decoding
        and the final sample read them many times; the servers' copies may be moving)."""
        self._current()  # a restore since the last copy makes it stale
        if self._local is None:
            self.drain()
            with translated():
                self._local = {
                    n: tf.constant(tf.convert_to_tensor(v).numpy()) for n, v in self.params.items()
                }
        return self._local

    def numpy_params(self) -> dict[str, np.ndarray]:
        return {n: v.numpy() for n, v in self.local_params().items()}

    def _own(self, params: Any) -> Any:
        return self.local_params() if params is self.params else params

    # ---------------------------------------------------------------- data
    def read_on_workers(self, records: RowRecords) -> None:
        """From now on each worker makes its steps' batches from these records (written
        beside the encoded split if they are not there yet)."""
        self._records = WorkerRecords(records)

    def local_rows(self, rows: int) -> tuple[int, int] | None:
        """None of a batch's ids, once the workers read them; else all of them."""
        return None if self._records is None else (0, 0)

    def _step_args(self, batch: Any) -> tuple[dict, dict, int]:
        """What a step carries of its batch: the arrays the worker does not make, the
        records' byte offsets of its rows, and its length."""
        if self._records is None:
            return self.batch_tensors(batch), {}, 0
        made = self._records.made
        arrays = {k: tf.convert_to_tensor(v) for k, v in batch.arrays.items() if k not in made}
        reads = self._records.reads(batch.indices, batch.rows)
        return arrays, reads, int(batch.bucket)

    # ---------------------------------------------------------------- steps
    def _worker_impl(
        self, arrays: dict, reads: dict, length: int, lr: tf.Tensor, step: tf.Tensor
    ) -> tf.Tensor:
        """One step on a worker: its batch (read here from the records, if it reads them),
        each variable read once, the gradient of the loss at those values, and the update
        assigned to the variables (on their servers)."""
        if reads:
            assert self._records is not None
            arrays = dict(arrays) | self._records.assemble(reads, length)
        rng = tf.random.experimental.stateless_fold_in(self.seed, step)
        names = list(self.params)
        values = [tf.convert_to_tensor(self.params[n]) for n in names]  # whole, if sharded
        with tf.GradientTape() as tape:
            tape.watch(values)
            params = dict(zip(names, values, strict=True))
            outputs = self.forward(arrays, rng, training=True, params=params)
            metrics = self.train_criterion(outputs, arrays, params)
        grads = tape.gradient(
            metrics["loss"], values, unconnected_gradients=tf.UnconnectedGradients.ZERO
        )
        grads = [tf.convert_to_tensor(g) for g in grads]
        # The optimizer reads its state (moments, count) once the gradient is known, not at
        # the step's start, as TF would otherwise schedule those reads: a read-modify-write
        # spanning a whole step would let the other workers' writes in between be lost.
        with tf.control_dependencies(grads):
            # The update count Adam's bias correction reads is the step's own: workers doing
            # `count + 1` on the shared count would lose increments, and a count that lags
            # the steps shrinks every update (see `settle`).
            self.opt.count.assign(step)
            norm = self.update(grads, lr)
        out = dict(metrics) | {"grad_norm": norm}
        return tf.stack([tf.cast(out[k], tf.float32) for k in METRICS])

    def train_step(
        self, state: dict[str, Any], batch: Any, lr: float
    ) -> tuple[dict, dict[str, Metric]]:
        """Schedule one step on a free worker; returns at once (its metrics wait for it)."""
        if state["params"] is not self.params:
            raise ValueError("a PsModel steps only its own variables (pass model.state)")
        step = self._current()
        if step is None:
            step = int(self.step.numpy())
        self._next, self._local = step + 1, None
        arrays, reads, length = self._step_args(batch)
        lr_, step_ = tf.constant(lr, tf.float32), tf.constant(step, tf.int32)
        args = (arrays, reads, length, lr_, step_)
        with translated():
            remote = self.link.coordinator.schedule(self._worker_step, args=args)
        return state, {k: Metric(remote, i) for i, k in enumerate(METRICS)}

    def eval_step(self, params: dict[str, Any], batch: Any) -> dict[str, tf.Tensor]:
        return super().eval_step(self._own(params), batch)

    def logits(self, params: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> tf.Tensor:
        return super().logits(self._own(params), arrays)

    def decoder(self, params: Any, bos: int, eos: int, pad: int) -> Any:
        return super().decoder(self._own(params), bos, eos, pad)


def settle(state: Mapping[str, Any], step: int) -> None:
    """At a step boundary, `step` steps were applied: the state's step and the optimizer's
    update count say so, as in a synchronous run (the workers' own writes to them race, and a
    step rerun after its worker died may have counted twice)."""
    state["step"].assign(step)
    state["opt"].count.assign(step)


class PsCheckpoints(TfCheckpoints):
    """`TfCheckpoints` of an asynchronous run: a checkpoint waits for the scheduled steps."""

    def __init__(self, directory: Path, keep: int, link: Link) -> None:
        super().__init__(directory, keep)
        self.link = link

    def save(self, step: int, state: dict[str, Any]) -> None:
        self.link.join()
        settle(state, step)
        with translated():
            super().save(step, state)

    def restore(self, like: dict[str, Any], step: int | None = None) -> dict[str, Any]:
        self.link.join()
        self.link.restores += 1
        with translated():
            return super().restore(like, step)


def ps_model(
    task: CompiledTask,
    train: TrainConfig,
    link: Link,
    *,
    placed: bool = False,
    jit_compile: bool = False,
) -> PsModel:
    """The chief's model; a placement plan has no meaning here (a worker runs a whole step)."""
    if placed:
        raise DeviceError(
            "an asynchronous run computes each step on one worker: it cannot also place the "
            "model's ops over several devices",
            code="cannot-place",
            hint="set distribution.placement = single (--set distribution.placement=single)",
        )
    return PsModel(task, train, train.seed, link=link, jit_compile=jit_compile)
