"""The fields each block of a .seq spec allows (namespace "block").

Why blocks are declared as kinds: a block body (`train { steps = 20000 }`) is checked exactly
like a call with named arguments, so declaring each block's fields as the params of a kind lets
one checker, one error format and one documentation printer cover calls and blocks alike. The
kind's name is the block keyword; its params are the fields, and none is positional.

Fields typed `any` hold references to other declarations (a task's input and model, an
experiment's tasks); they are resolved
and checked by the compiler, not by type here.

A default that is itself a kind is the string naming it ("adam", "cross_entropy", "single"): the
checker treats it as the bare call with every param at its default.

Counts and sizes are ints > 0 (`steps`, batch sizes, both sides of a bucket), intervals where 0
means "never" are >= 0, and seeds are >= 0 (numpy refuses negative ones).
"""

from __future__ import annotations

from typing import Final

from seqc.spec.kinds import REGISTRY, KindSpec, ParamSpec, declare, param
from seqc.spec.types import (
    ANY,
    BOOL,
    FLOAT,
    INT,
    NON_NEGATIVE,
    POSITIVE,
    STR,
    Type,
    kind,
    list_of,
    map_of,
    one_of,
    union,
)
from seqc.spec.types import optional as opt

SECONDS: Final[Type] = FLOAT.within(POSITIVE)
"""A length of audio in seconds (a bucket's bound, `max_length`, for an audio reader)."""

NAMESPACE: Final[str] = "block"

REGISTRY.docs[NAMESPACE] = "Fields of each block of a spec; a block is checked like a call."


def block(name: str, doc: str, *fields: ParamSpec) -> KindSpec:
    """Declare one block; its fields are named only, never positional."""
    return declare(NAMESPACE, name, doc, *fields, positional=())


_READER: Type = kind("reader")
COUNT: Type = INT.within(POSITIVE)
"""A number of steps, examples, tokens or devices: an int > 0."""
EVERY: Type = INT.within(NON_NEGATIVE)
"""An interval in steps, where 0 means never: an int >= 0."""
SEED: Type = INT.within(NON_NEGATIVE)

block(
    "input",
    "Where a task's examples come from and how their text becomes token ids.",
    param("train", _READER, doc="Reader of the training data; the tokenizer is fitted on it."),
    param("dev", opt(_READER), None, "Reader of the data evaluated during training; optional."),
    param("test", opt(_READER), None, "Reader of held-out data evaluated after training."),
    param("tokenizer", kind("tokenizer"), doc="Tokenizer of the source (and target) text."),
    param(
        "target_tokenizer",
        opt(kind("tokenizer")),
        None,
        "Separate tokenizer for the target side; none shares `tokenizer`.",
    ),
    param(
        "buckets",
        map_of(union(COUNT, SECONDS), COUNT),
        {},
        "Length buckets as upper bound on length: batch size; empty for one batch size. "
        "Lengths are tokens, or seconds of audio for an audio reader (`{2.5: 32, 5: 16}`).",
    ),
    param(
        "max_length",
        union(COUNT, SECONDS),
        256,
        "Drop training examples longer than this many tokens (seconds for an audio reader).",
    ),
    param("shuffle_buffer", EVERY, 10000, "Examples held in the shuffle buffer; 0 for no shuffle."),
    param("seed", SEED, 1, "Seed of the shuffling order."),
    param("lowercase", BOOL, False, "Lowercase all text before tokenising."),
    param(
        "augment",
        list_of(kind("augment")),
        [],
        "Augmentations of an audio input's training utterances, in order (`[speed([0.9, 1.0, "
        "1.1]), noise([10, 30], p = 0.5)]`); the train split only, seeded by `seed`.",
    ),
)

block(
    "task",
    "One objective: which data feeds which model, with what loss, metrics and decoding.",
    param("input", ANY, doc="Name of the input block the task reads."),
    param("model", ANY, doc="Name of the model the task trains."),
    param("loss", kind("loss"), "cross_entropy", "Training objective."),
    param("metrics", list_of(kind("metric")), [], "Numbers reported on dev and test data."),
    param("decode", opt(kind("decode")), None, "How to generate output; none for scoring only."),
    param(
        "weight",
        FLOAT,
        1.0,
        "Weight of this task's loss when several tasks train together.",
        range=NON_NEGATIVE,
    ),
)

block(
    "train",
    "How the model is optimised: update rule, length of training, numerics and bookkeeping.",
    param("optimizer", kind("optimizer"), "adam", "Update rule, with its learning rate."),
    param("steps", COUNT, 1000, "Number of optimizer updates."),
    param(
        "batch_size",
        opt(COUNT),
        None,
        "Examples per batch; none takes batch sizes from the input block's buckets.",
    ),
    param("accumulate", COUNT, 1, "Batches whose gradients are summed before each update."),
    param("seed", SEED, 1, "Seed of weight initialisation and dropout."),
    param(
        "clip_norm",
        FLOAT,
        1.0,
        "Clip the global gradient norm to this; 0 turns clipping off.",
        range=NON_NEGATIVE,
    ),
    param(
        "compute_dtype",
        one_of("float32", "bfloat16"),
        "float32",
        "Number format of activations and matrix products; weights stay float32.",
    ),
    param("checkpoint_every", EVERY, 1000, "Save a checkpoint every this many steps; 0 for none."),
    param(
        "keep_checkpoints",
        COUNT,
        3,
        "How many of the newest checkpoints a run keeps (older ones are deleted): as many as "
        "`seqc average --last N` should average.",
    ),
    param("eval_every", EVERY, 500, "Evaluate on dev data every this many steps; 0 for never."),
    param(
        "dev_translations",
        EVERY,
        0,
        "A translation task listing bleu or chrf: decode this many dev examples at each "
        "evaluation and score them (0: none, perplexity only; decoding costs time).",
    ),
    param(
        "patience",
        EVERY,
        0,
        "Stop after this many dev evaluations without a better score (BLEU when it is measured, "
        "else WER, else perplexity); 0 trains for all the steps.",
    ),
    param("log_every", EVERY, 100, "Log training loss and speed every this many steps."),
    param(
        "mix",
        map_of(STR, FLOAT.within(NON_NEGATIVE)),
        {},
        'Several tasks: each task\'s share of the steps (or loss weight for mix_by = "sum"), '
        "e.g. {en_es: 0.5, es_en: 0.5}; empty takes each task's `weight`.",
    ),
    param(
        "mix_by",
        one_of("sample", "round_robin", "sum"),
        "sample",
        "Several tasks: draw one task per step by its weight, interleave them in proportion "
        "to their weights (deterministic), or take one step on the weighted sum of all losses.",
    ),
    param(
        "lr_scale",
        map_of(STR, FLOAT.within(POSITIVE)),
        {},
        "Several tasks: a task's learning rate as a multiple of the schedule's (default 1).",
    ),
    param(
        "init_from",
        opt(kind("init")),
        None,
        'Warm start: load tensors of another run\'s checkpoint, e.g. checkpoint("runs/x", map = '
        '{"encoder.*": "encoder.*"}); none initialises every param fresh.',
    ),
)

MESH_AXES: Final[tuple[str, ...]] = ("stage", "data", "fsdp", "expert", "model")
"""The mesh axes a distribution block may name: pipeline stages, data parallel, parameter
sharding (ZeRO-3 / FSDP), experts of mixture-of-experts layers, and tensor (model) parallel."""
SHARD_AXES: Final[tuple[str, ...]] = ("data", "fsdp", "expert", "model")
"""The axes a sharding rule may split a param's dimension over (a stage holds whole layers)."""

block(
    "distribution",
    "How training is spread over devices: the mesh, the devices and the layer placement.",
    param(
        "mesh",
        map_of(one_of(*MESH_AXES), COUNT),
        {"data": 1},
        "Named mesh axes and their sizes; the product is the number of devices used. Axes: "
        "stage (pipeline stages, with `pipeline`), data, fsdp, expert (the experts of MoE layers), "
        "model.",
    ),
    param(
        "devices",
        opt(list_of(kind("device"))),
        None,
        'Device list, e.g. 4 x gpu(memory = "16GiB"); none uses whatever the backend finds.',
    ),
    param("placement", kind("placement"), "single", "Algorithm assigning layers to devices."),
    param(
        "comm",
        one_of("sequential", "parallel"),
        "sequential",
        "Whether a device sends one tensor at a time or many at once, as the placer assumes.",
    ),
    param(
        "sync",
        one_of("sync", "async"),
        "sync",
        "Whether data-parallel replicas wait for each other's gradients every step.",
    ),
    param(
        "pipeline",
        opt(kind("pipeline")),
        None,
        "How micro-batches flow through the mesh's stage axis: none, or gpipe(microbatches = 8).",
    ),
    param(
        "stages",
        kind("stages"),
        "auto",
        "Where each pipeline stage begins: auto (the cost model's optimal split) or "
        'manual(["blocks.2", "norm"]) (the layer each stage after the first begins at).',
    ),
    param(
        "shard",
        map_of(STR, list_of(opt(one_of(*SHARD_AXES)))),
        {},
        "Sharding rules by param path (a glob) to one mesh axis or none per dimension, e.g. "
        '{"blocks.*.mlp.w1.w": [none, "model"]}; they override the defaults of the layer kinds.',
    ),
)

PASS_NAMES: Final = ("fuse_loss", "fuse_matmul", "fuse_attention", "cse", "dce")
"""The compiler's passes on a model's training graph, in the order they run
(`seqc.compiler.passes`, which checks that it implements exactly these)."""

DEFAULT_PASSES: Final = PASS_NAMES

block(
    "compile",
    "How the compiler rewrites the model's graph before a training step runs it.",
    param(
        "passes",
        list_of(one_of(*PASS_NAMES)),
        list(DEFAULT_PASSES),
        "Passes on the training graph (they always run in the order fuse_loss, fuse_matmul, "
        "fuse_attention, cse, dce): fuse_loss computes a Softmax output layer and its "
        "cross-entropy as one op, a chunk of positions at a time, never the whole "
        "[tokens, vocab] logits; fuse_matmul makes sibling matmuls that read one input one "
        "product (q, k and v), fuse_attention makes each attention's scores, mask, softmax "
        "and weighted sum one op (cuDNN's fused kernel under JAX on a GPU in bfloat16), cse "
        "computes identical ops once, dce removes ops nothing reads. [] trains the graph as "
        "lowered; `seqc show --graph --passes` shows what each did.",
    ),
)

block(
    "export",
    "Serving formats written after training.",
    param("formats", list_of(kind("export")), [], "Formats to write; empty writes none."),
    param("path", STR, "export", "Directory the exports are written to, inside the run's."),
)

block(
    "experiment",
    "A named, runnable combination of tasks, with registry-level fields.",
    param("tasks", list_of(ANY), doc="Names of the tasks trained together."),
    param("description", STR, "", "One line shown by `seqc list`."),
    param("tags", list_of(STR), [], "Free-form labels for filtering experiments."),
    param("backend", one_of("jax", "tf"), "jax", "Framework the experiment compiles to."),
)
