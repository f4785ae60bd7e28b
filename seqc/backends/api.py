"""The contract between the run commands (`seqc.run`) and a backend.

`seqc.run` drives training, evaluation, decoding and export through these Protocols only, and
finds backends through `seqc.backends.registry`; it never imports a backend package. A backend
implements them inside its own folder (`seqc/backends/<name>/backend.py`), so a new backend,
or a new run mode, is added in one place:

- `Backend` (a training backend: JAX, TF): builds a `Model` from a compiled task, stores and
  reads checkpoints (`CheckpointStore`, `Weights`), runs any op graph once (`run`), and gives
  the `StepFunctions` of an encoder and decoder-step program;
- `Model`: the train and eval steps of one task, its params, and (optionally) a decoder of its
  own (TF decodes inside one graph);
- `MultiTaskModel`: the tasks of a multi-task experiment over one set of params (shared layers
  once), stepping one task, or the weighted sum of all, per update; each task's `Model` for
  evaluation and decoding;
- `ArtifactFormat` (ONNX, TFLite, SavedModel): builds a deployment artifact from an
  `ExportJob` and loads one back as `StepFunctions`.

Values crossing the contract are numpy arrays (weights by layer path, feeds and fetches) or
opaque to the caller (a model's state, which only its backend reads). Configuration crosses it
typed (`seqc.compiler.config`: `TrainConfig`, `DecodeConfig`), as `compile_task` built it, never
as the resolved spec: a backend does not import `seqc.resolve`. Learning rates are computed on
the host (`seqc.run.train.schedule`) and given to each step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from seqc.compiler.compile import CompiledTask
from seqc.compiler.config import DecodeConfig, TrainConfig
from seqc.compiler.graph import Graph
from seqc.compiler.incremental import StepProgram
from seqc.compiler.multitask import MultiTask
from seqc.compiler.sharding import ShardingPlan
from seqc.compiler.step_signature import StepSignature
from seqc.spec.errors import SeqcError

State = dict[str, Any]
"""A model's training state: `params` (by layer path), optimizer state, step, rng. Opaque to
the run commands except `state["params"]` and `state["step"]`."""

Arrays = Mapping[str, np.ndarray]
Placement = Mapping[int, int]
"""Op id of the forward graph -> device index of a placement plan (0, 1, ...)."""


@dataclass(frozen=True)
class Cluster:
    """This process's place in a run of several processes (one process: the default).

    `role` is `worker` for every process of a synchronous run (process 0, the primary, owns
    the run directory); an asynchronous TF run has a `chief` that drives training, `worker`s
    that compute and `ps` (parameter servers) that hold the variables. `spec` is the whole
    cluster by role, with each process's address (what `TF_CONFIG` says)."""

    process_id: int = 0
    num_processes: int = 1
    coordinator: str | None = None
    """`host:port` of the process that coordinates (JAX's `jax.distributed` service)."""
    role: str = "worker"
    spec: dict[str, list[str]] = field(default_factory=dict)

    @property
    def primary(self) -> bool:
        """The process that writes the run directory and prints results."""
        return self.role == "chief" or (
            self.role == "worker" and self.process_id == 0 and "chief" not in self.spec
        )

    @property
    def several(self) -> bool:
        return self.num_processes > 1


@dataclass
class Weights:
    """A checkpoint's weights by layer path, whichever backend wrote it."""

    backend: str
    step: int
    params: dict[str, np.ndarray]
    path: Path
    full_state: bool
    """True when the checkpoint holds the optimizer state too (a run can resume from it)."""
    skipped: list[str] = field(default_factory=list)
    """Why each newer checkpoint could not be read (the newest readable one was taken)."""


class Generator(Protocol):
    """Generates token ids: greedy, sampling or beam search
    (`seqc.run.decoding.search.Decoder`), as `strategy` says (a task's `decode`,
    `CompiledTask.decode`)."""

    def generate(
        self,
        strategy: DecodeConfig,
        prompt: list[int],
        src: list[int] | None = None,
        seed: int = 0,
        stop_at_eos: bool = True,
    ) -> list[int]: ...


class RecordStream(Protocol):
    """One record per sequence of a split (`seqc.data.row_records.RecordStream`)."""

    lengths: Callable[[], np.ndarray]
    records: Callable[[], Iterator[np.ndarray]]
    kind: str


class RecordField(Protocol):
    """A batch field cut from a stream's records (`seqc.data.row_records.RecordField`)."""

    stream: str
    cut: str
    pad: int
    mask: str | None
    width: int


class RowRecords(Protocol):
    """A split's sequences as records, for processes that make their batches from disk
    (`seqc.data.row_records.RowRecords`)."""

    folder: Path
    key: str
    streams: Mapping[str, RecordStream]
    fields: Mapping[str, RecordField]


class Model(Protocol):
    """One task's model, criterion and optimizer on a backend, compiled."""

    backend: str
    task: CompiledTask
    strategy: str
    """How its steps use devices and processes, as `run.json` records it: `single`, `spmd`
    (JAX over a mesh), `mirrored`, `multi_worker_mirrored`, `parameter_server` (TF)."""

    def init(self, seed: int, given: Arrays | None = None) -> State:
        """A fresh state: params from `seqc.compiler.init` (the same on every backend), except
        those `given` (values known only from the data, such as a sampled loss's output bias,
        `seqc.run.train.candidates`)."""
        ...

    def with_params(self, params: Arrays) -> State:
        """A fresh state whose params are these arrays (a fresh optimizer)."""
        ...

    def train_step(self, state: State, batch: Any, lr: float) -> tuple[State, Mapping[str, Any]]:
        """One update at learning rate `lr`; metrics `loss`, `nll_sum`, `tokens`, `grad_norm`
        (backend values: read them with `fetch`, which waits for the step)."""
        ...

    def eval_step(self, params: Any, batch: Any) -> Mapping[str, Any]:
        """`loss`, `nll_sum`, `tokens`, `correct` of a batch (see `lower.criterion`)."""
        ...

    def local_rows(self, rows: int) -> tuple[int, int] | None:
        """The rows [lo, hi) of a training batch of `rows` rows that this process's devices
        take, or None when it takes them all (one process, or a chief that feeds workers).
        The input pipeline reads only those rows' ids from disk; the other rows carry their
        masks, which some strategies weigh replicas by, and ids no device reads."""
        ...

    def read_on_workers(self, records: RowRecords) -> None:
        """Have the processes that run this model's training steps make each step's batch
        from these records on disk (a parameter-server worker); from then on `local_rows` is
        (0, 0): the chief sends a step only where its rows are. A model whose steps run in
        this process ignores it."""
        ...

    def logits(self, params: Any, arrays: Arrays) -> Any:
        """The forward graph's logits for a batch's arrays, no dropout."""
        ...

    def decoder(self, params: Any, bos: int, eos: int, pad: int) -> Generator | None:
        """A decoder of the backend's own, or None to decode on the host over `logits`."""
        ...


class MultiTaskModel(Protocol):
    """The tasks of a multi-task experiment on a backend: one state, whose params are the union
    of the tasks' (a shared layer's once), and a step that trains some of the tasks.

    How the optimizer state is kept follows the mix (`train.mix_by`): stepping one task at a
    time (`sample`, `round_robin`), each task has its own optimizer state over the params it
    reads (Lingvo's per-task learners: a shared layer's moments are per task, so a task's
    gradient scale does not set another's step sizes, and params a step does not read stay
    put); stepping the weighted sum of every task's loss (`sum`), one optimizer state over all.
    """

    backend: str
    strategy: str
    multi: MultiTask

    def init(self, seed: int, given: Arrays | None = None) -> State:
        """A fresh state: every task's params from `seqc.compiler.init` (a shared param is
        drawn once, by its name), except those `given`."""
        ...

    def train_step(
        self, state: State, batches: Mapping[str, Any], lr: Mapping[str, float]
    ) -> tuple[State, dict[str, Mapping[str, Any]]]:
        """One update on the batches of the tasks named (one task; every task for `sum`), each
        task at its learning rate; the metrics of each task (those of `Model.train_step`)."""
        ...

    def view(self, task: str) -> Model:
        """Task `task`'s model: its eval steps, logits and decoder, on params that hold its
        own (a dict holding more is fine)."""
        ...

    def task_params(self, task: str, params: Any) -> Any:
        """The params `task` reads, out of the whole model's."""
        ...


class CheckpointStore(Protocol):
    """Numbered checkpoints of a model's whole state in one folder, written atomically."""

    directory: Path

    def save(self, step: int, state: State) -> None:
        """Checkpoint `step`; `NoSpace` when its device is full (nothing of it left)."""
        ...

    def latest(self) -> int | None: ...

    skipped: list[str]
    """Why each checkpoint `restore` passed over could not be read."""

    def restore(self, like: State, step: int | None = None) -> State:
        """The state of checkpoint `step`, shaped like `like`; by default the newest that can
        be read, setting each damaged newer one aside (`skipped` says why)."""
        ...

    def close(self) -> None: ...


class StepFunctions(Protocol):
    """An encoder and a decoder step with explicit caches: numpy in, numpy out.

    A runtime with arrays of its own (JAX) may return the caches as those, kept where it
    computes, and take them back as they are; it then also has `hold(arrays)` (the encoder's
    outputs moved there once, rather than at every step) and `reorder(caches, parents, axes)`
    (the caches' rows in the order `parents` along each cache's batch axis, done there too).
    Why: at beam 4 and 16 sources a step reads and writes tens of megabytes of caches, and
    copying them to the host and back cost more than the step's arithmetic. A runtime whose
    steps gain from more rows says how many sources to decode together in `batch_sources`
    (`seqc.run.decoding.steps.decode_all`; one at a time without it).

    A language model's artifact whose format carries its whole-sentence scorer
    (`StepProgram.sequence`: ONNX) also has `sequence(feeds)`, the score of each given next
    token [B, T] in one call; `sentence_scorer` finds it."""

    def encode(self, feeds: Arrays) -> dict[str, np.ndarray]: ...

    def step(self, feeds: Arrays) -> tuple[np.ndarray, dict[str, np.ndarray]]: ...


SentenceScorer = Callable[[Arrays], np.ndarray]
"""A language model's whole-sentence scorer: its feeds in, each next token's score [B, T] out."""


def sentence_scorer(fns: StepFunctions) -> SentenceScorer | None:
    """The whole-sentence scorer of a runtime that has one (`StepFunctions`), else None."""
    scorer = getattr(fns, "sequence", None)
    return scorer if callable(scorer) else None


class Backend(Protocol):
    """A training backend."""

    name: str
    """Its `--backend` name: `jax`, `tf`."""
    title: str
    """Its name in messages: `JAX`, `TensorFlow`."""
    places_ops: bool
    """Whether `model(..., placement=...)` runs each op on its planned device."""
    trains_async: bool
    """Whether it trains asynchronously with parameter servers (`distribution.sync = "async"`)."""

    def start(self, cluster: Cluster) -> None:
        """Join the run's other processes (before the framework computes anything); a process
        whose role only serves (a parameter server) serves here until the run ends."""
        ...

    def any_process(self, flag: bool) -> bool:
        """Whether `flag` is set on any process of the run (all must call it, together):
        how every process agrees to stop at the same step."""
        ...

    def barrier(self, name: str) -> None:
        """Wait until every process of the run reaches the barrier `name`."""
        ...

    def collective_failure(self, error: BaseException) -> bool:
        """Whether `error`, raised in a run of several processes, is the engine's report of a
        collective that failed (another process died or cannot be reached)."""
        ...

    def lost_server(self, error: BaseException) -> SeqcError | None:
        """The clear error for `error` when it is the engine's report that a server holding the
        run's state is gone (a TF parameter server), else None. Asked before a failed
        collective is reported: a server killed mid-step can reach the chief as a reset
        connection, which would otherwise read as a lost peer process."""
        ...

    def leave(self) -> None:
        """Another process of the run is gone: let this one end without the goodbye the engine
        says at exit, which waits for every process (JAX's shutdown barrier waits minutes for
        a dead one, then aborts with a native stack trace)."""
        ...

    def model(
        self,
        task: CompiledTask,
        train: TrainConfig,
        *,
        placement: Placement | None = None,
        sharding: ShardingPlan | None = None,
        jit_compile: bool = False,
    ) -> Model:
        """The task's model; with `placement`, each op on its planned device; with a
        `sharding` plan, data and params split over a mesh of every process's devices."""
        ...

    def multitask_model(
        self,
        multi: MultiTask,
        train: TrainConfig,
        weights: Mapping[str, float],
        *,
        jit_compile: bool = False,
    ) -> MultiTaskModel:
        """The tasks of `multi` over one set of params, on one device of one process; with
        `train.mix_by = "sum"` a step trains `sum(weights[t] * loss_t)`."""
        ...

    def checkpoints(self, directory: Path, keep: int) -> CheckpointStore:
        """The store of the checkpoints in `directory`, keeping the newest `keep` of them
        (`train.keep_checkpoints`) when it saves."""
        ...

    def wrote(self, directory: Path) -> bool:
        """Whether the checkpoints in this folder are this backend's."""
        ...

    def steps(self, directory: Path) -> list[int]:
        """The steps of this backend's checkpoints in this folder, oldest first (one being
        written or set aside is not listed)."""
        ...

    def read_weights(self, directory: Path, step: int | None = None) -> Weights: ...

    def write_weights(self, weights: Weights, directory: Path) -> None:
        """A weights-only checkpoint (params and step) in this backend's format."""
        ...

    def run(self, graph: Graph, params: Arrays, inputs: Arrays) -> list[np.ndarray]:
        """The graph's outputs, compiled once per graph and input shapes (inference mode)."""
        ...

    def profile_op(self, graph: Graph, inputs: Arrays, reps: int) -> tuple[float, float]:
        """Median seconds of the forward pass, and of the backward pass (the gradient of the sum
        of the output with respect to every float input, less the forward), of a graph of one
        op (`seqc.run.devices.profile`), compiled as a training step compiles it, after warm-up."""
        ...

    def step_functions(self, program: StepProgram, params: Arrays) -> StepFunctions:
        """The program's encoder and step over `params`. Given the same program object again
        (new weights at each evaluation of a run), a backend may reuse what it compiled."""
        ...


@dataclass
class ExportJob:
    """What an artifact format needs to build an artifact of one trained model."""

    graph: Graph
    """The model's forward graph."""
    params: dict[str, np.ndarray]
    program: StepProgram
    signature: StepSignature
    metadata: dict[str, str]
    """Experiment and task names, for formats that carry metadata in the model file."""
    calibration: Callable[[str], list[dict[str, np.ndarray]]]
    """Real feeds of the `encoder`, `step` or `sequence` graph (dev data run through the
    reference backend's step functions), for static quantization and representative
    datasets."""
    probe: Callable[[str], dict[str, np.ndarray]]
    """One small real feed of the `encoder` or the `step` graph, for a check of the float model
    that needs one run (a float export draws no calibration set for it)."""
    keep_float: tuple[str, ...] = ()
    """Layer paths an int8 artifact leaves in float (formats that can: TFLite)."""
    shared: Path | None = None
    """A folder that lasts the whole export of the task, for what a format builds once from the
    model and converts in each quantization (TFLite's SavedModel); None: nothing is kept."""
    variant: str = "forward"
    """Which of the task's graphs this is (`forward`, or `scoring` for a raw-score artifact):
    the name under which a format keeps its intermediates in `shared`."""


class ArtifactFormat(Protocol):
    """A deployment format: how to build an artifact folder and run one."""

    name: str
    quantize: tuple[str, ...]
    """The quantization modes it has, `none` first."""
    model_files: tuple[str, ...]
    """The files (or folders) of an artifact that hold the model, for its size."""

    def build(self, job: ExportJob, folder: Path, quantize: str, work: Path) -> dict[str, Any]:
        """Write the model files into `folder` (`work` is scratch space); returns extra
        figures for the manifest."""
        ...

    def runtime(self, folder: Path, signature: StepSignature) -> StepFunctions: ...

    def stamp(self, folder: Path, props: Mapping[str, str]) -> None:
        """Write `props` (the manifest, the frozen spec, the sha256 of the tokenizer beside
        it, as text) into the model files themselves where the format has room for metadata,
        so a model file that travels alone still says what it is; a no-op otherwise."""
        ...


class NoSpace(Exception):
    """A checkpoint could not be written: the device it goes to is full. A `CheckpointStore`
    raises it having removed what it had begun to write of that checkpoint, so the ones
    before it stay intact and the store lists only whole checkpoints."""

    def __init__(
        self, step: int, directory: Path, device: Path, free: int, needed: int | None
    ) -> None:
        super().__init__(f"no space left on {device} writing checkpoint {step} in {directory}")
        self.step, self.directory = step, directory
        self.device = device
        """The mount point of the file system that holds `directory`."""
        self.free = free
        """Bytes free there when it was found full."""
        self.needed = needed
        """About how many bytes the checkpoint takes, when known."""


class MetricsLost(Exception):
    """A step ran (its update is in the params) but its metrics cannot be read: they were on
    a worker of an asynchronous run that died before the chief fetched them. The loop logs
    nothing for that step and goes on; the coordinator runs the remaining steps elsewhere."""


def fetch(tree: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Metrics of a step (device arrays or tensors) as numpy values; waits for the step."""
    return {k: np.asarray(v) for k, v in tree.items()}
