"""Built-in layers: the kinds a `model` body may call (namespace "layer").

Why one declaration per layer here rather than in the backends: the front end checks every layer
call (names, types, positional order) before any backend is imported, and `seqc layers` prints
its reference from these same declarations, so the docs cannot drift from what the checker
accepts. Backends map each name to their own implementation.

Shapes are given in words: B is the batch, T the time (sequence) axis, S the memory (source)
axis of cross-attention. Each kind lists the params that may be given positionally, e.g.
`SelfAttention(d, heads, causal = true)` or `Softmax(vocab, d, tie = embed)`.

Every width, count and length is an int > 0, every dropout rate is in [0, 1) (1 would drop
everything and divide by zero when rescaling), and rules between params (`d % heads == 0`) are
declared as relations with the kind; the checker reports a value outside them at its line.
"""

from __future__ import annotations

from typing import Final

from seqc.spec.kinds import REGISTRY, Relation, declare, divides, less_than, multiple_of, param
from seqc.spec.types import (
    BOOL,
    FLOAT,
    FRACTION,
    INT,
    LAYER,
    NON_NEGATIVE,
    POSITIVE,
    Type,
    one_of,
    optional,
)

NAMESPACE: Final[str] = "layer"

ACTIVATIONS: Final[tuple[str, ...]] = ("none", "relu", "gelu", "silu", "tanh", "sigmoid")
"""Elementwise functions a layer may apply to its output; "none" is the identity."""

FF_ACTIVATIONS: Final[tuple[str, ...]] = ACTIVATIONS[1:]
"""Hidden activations of a feed-forward block (the identity would make it a plain linear map)."""

ACTIVATION: Final[Type] = one_of(*ACTIVATIONS)
FF_ACTIVATION: Final[Type] = one_of(*FF_ACTIVATIONS)

DIM: Final[Type] = INT.within(POSITIVE)
"""A width, a count of heads, layers or ids, a length: an int > 0."""

RATE: Final[Type] = FLOAT.within(FRACTION)
"""A dropout rate, in [0, 1)."""

HEADS_DIVIDE_D: Final[Relation] = divides(
    "heads", "d", unless="head_dim", hint="choose heads dividing d, or set head_dim"
)
"""Attention splits d into `heads` equal parts unless each head's width is given."""

REGISTRY.docs[NAMESPACE] = (
    "Layers a model body calls. Each takes and returns [B, T, d]-shaped sequences unless its "
    "doc says otherwise."
)

# --- embeddings and positions ------------------------------------------------------------------

declare(
    NAMESPACE,
    "Embedding",
    "Looks up a learned vector per token id: int ids [B, T] -> [B, T, d].",
    param("vocab", DIM, doc="Number of token ids (rows of the table)."),
    param("d", DIM, doc="Width of each embedding vector."),
    param(
        "init_scale",
        FLOAT,
        1.0,
        "Std-dev of the normal initializer, before dividing by sqrt(d).",
        range=NON_NEGATIVE,
    ),
    param(
        "scale_output",
        BOOL,
        False,
        "Multiply the looked-up vectors by sqrt(d), as the Transformer does before adding "
        "positions.",
    ),
    param(
        "padding_id",
        optional(INT),
        None,
        "Token id whose vector is fixed at zero and gets no gradient; none for no padding row.",
        range=NON_NEGATIVE,
    ),
    positional=("vocab", "d"),
    relations=(less_than("padding_id", "vocab", hint="a padding id is a row of the table"),),
)

declare(
    NAMESPACE,
    "SinusoidalPosition",
    "Adds fixed sine/cosine position signals (Vaswani et al.): [B, T, d] -> [B, T, d]. "
    "Has no weights.",
    param("d", DIM, doc="Width of the signal; must equal the width of the input."),
    param("max_length", DIM, 4096, "Longest sequence the precomputed table covers."),
    param("min_timescale", FLOAT, 1.0, "Shortest wavelength of the sinusoids.", range=POSITIVE),
    param("max_timescale", FLOAT, 10000.0, "Longest wavelength of the sinusoids.", range=POSITIVE),
    positional=("d",),
    relations=(multiple_of("d", 2, hint="sines and cosines fill half the width each"),),
)

declare(
    NAMESPACE,
    "LearnedPosition",
    "Adds a learned vector per position: [B, T, d] -> [B, T, d], with T <= max_length.",
    param("max_length", DIM, doc="Number of positions with their own vector."),
    param("d", DIM, doc="Width of each position vector; must equal the width of the input."),
    param("init_scale", FLOAT, 0.02, "Std-dev of the normal initializer.", range=NON_NEGATIVE),
    positional=("max_length", "d"),
)

# --- dense layers and normalisation ------------------------------------------------------------

declare(
    NAMESPACE,
    "Linear",
    "Affine map on the last axis, then an optional activation: [B, T, d_in] -> [B, T, d_out].",
    param("d_in", DIM, doc="Width of the input's last axis."),
    param("d_out", DIM, doc="Width of the output's last axis."),
    param("bias", BOOL, True, "Add a learned bias vector after the matrix product."),
    param("activation", ACTIVATION, "none", "Elementwise function applied to the output."),
    positional=("d_in", "d_out"),
)

declare(
    NAMESPACE,
    "Activation",
    "Applies an elementwise function: [B, T, d] -> [B, T, d]. Has no weights.",
    param("fn", FF_ACTIVATION, doc="The function to apply."),
    positional=("fn",),
)

declare(
    NAMESPACE,
    "LayerNorm",
    "Normalises each vector to zero mean and unit variance over the last axis, then scales "
    "and shifts it: [B, T, d] -> [B, T, d].",
    param("d", DIM, doc="Width of the normalised axis."),
    param(
        "eps",
        FLOAT,
        1e-6,
        "Added to the variance before the square root, for stability.",
        range=POSITIVE,
    ),
    param("scale", BOOL, True, "Learn a per-feature gain (initialised to one)."),
    param("bias", BOOL, True, "Learn a per-feature offset (initialised to zero)."),
    positional=("d",),
)

declare(
    NAMESPACE,
    "RMSNorm",
    "Divides each vector by its root mean square over the last axis (no centring), then "
    "scales it: [B, T, d] -> [B, T, d].",
    param("d", DIM, doc="Width of the normalised axis."),
    param("eps", FLOAT, 1e-6, "Added to the mean square before the square root.", range=POSITIVE),
    param("scale", BOOL, True, "Learn a per-feature gain (initialised to one)."),
    positional=("d",),
)

declare(
    NAMESPACE,
    "FeedForward",
    "Position-wise two-layer MLP d -> ff -> d with a hidden activation: "
    "[B, T, d] -> [B, T, d]. No residual connection or normalisation is added.",
    param("d", DIM, doc="Width of the input and output."),
    param("ff", DIM, doc="Width of the hidden layer."),
    param("activation", FF_ACTIVATION, "relu", "Elementwise function on the hidden layer."),
    param("dropout", RATE, 0.0, "Dropout rate on the hidden layer during training."),
    param(
        "gated",
        BOOL,
        False,
        "Use a gated hidden layer act(x W) * (x V) (GLU family; gelu gives GeGLU, silu SwiGLU).",
    ),
    param("bias", BOOL, True, "Learn bias vectors in both projections."),
    positional=("d", "ff"),
)

declare(
    NAMESPACE,
    "MoE",
    "Mixture of experts in place of a feed-forward block (GShard, Switch): a router sends each "
    "token to its `top_k` experts, each a two-layer MLP d -> ff -> d, and sums their outputs "
    "weighted by the router's gates: [B, T, d] -> [B, T, d]. In training each sequence is a "
    "group and each expert takes at most ceil(capacity_factor * top_k * T / experts) of its "
    "tokens (earlier tokens first); the rest skip the layer. The load-balancing and router "
    "z losses join the task's loss. At inference no token is dropped.",
    param("d", DIM, doc="Width of the input and output."),
    param("ff", DIM, doc="Width of each expert's hidden layer."),
    param("experts", DIM, 8, "Number of experts."),
    param("top_k", DIM, 2, "Experts each token is sent to (1: Switch, 2: GShard)."),
    param(
        "capacity_factor",
        FLOAT,
        1.25,
        "Slots per expert, as a multiple of an even share of a sequence's assignments "
        "(top_k * T / experts); tokens past an expert's slots are dropped in training.",
        range=POSITIVE,
    ),
    param(
        "aux_loss",
        FLOAT,
        0.01,
        "Weight of the load-balancing loss experts * sum_e(f_e * p_e) in the task's loss.",
        range=NON_NEGATIVE,
    ),
    param(
        "router_z_loss",
        FLOAT,
        0.001,
        "Weight of the router z loss, the mean squared log-sum-exp of the router's logits.",
        range=NON_NEGATIVE,
    ),
    param("activation", FF_ACTIVATION, "gelu", "The experts' hidden activation."),
    param("dropout", RATE, 0.0, "Dropout rate on the experts' hidden layer during training."),
    positional=("d", "ff"),
    relations=(
        Relation(
            "top_k <= experts",
            ("top_k", "experts"),
            lambda k, e: k <= e,
            "top_k",
            hint="send each token to at most as many experts as there are",
        ),
    ),
)

declare(
    NAMESPACE,
    "Dropout",
    "Zeroes each element with probability `rate` during training and rescales the rest by "
    "1 / (1 - rate); the identity at inference: [B, T, d] -> [B, T, d].",
    param("rate", RATE, doc="Probability of dropping an element, in [0, 1)."),
    param(
        "broadcast_time",
        BOOL,
        False,
        "Use one mask for all time steps of a sequence (variational dropout).",
    ),
    positional=("rate",),
)

# --- attention ---------------------------------------------------------------------------------

declare(
    NAMESPACE,
    "SelfAttention",
    "Multi-head scaled dot-product attention of a sequence over itself, with input and "
    "output projections: [B, T, d] -> [B, T, d]. Padding positions are masked.",
    param("d", DIM, doc="Width of the input and output."),
    param("heads", DIM, doc="Number of attention heads."),
    param("causal", BOOL, False, "Let position t attend only to positions <= t (decoders, LMs)."),
    param("dropout", RATE, 0.0, "Dropout rate on the attention weights during training."),
    param(
        "head_dim",
        optional(DIM),
        None,
        "Width of each head's queries, keys and values; none means d / heads.",
    ),
    param("bias", BOOL, True, "Learn bias vectors in the query/key/value/output projections."),
    positional=("d", "heads"),
    relations=(HEADS_DIVIDE_D,),
)

declare(
    NAMESPACE,
    "CrossAttention",
    "Multi-head attention of a sequence (queries) over an encoder memory (keys and values): "
    "[B, T, d] and memory [B, S, d_memory] -> [B, T, d]. Memory padding is masked.",
    param("d", DIM, doc="Width of the queries and of the output."),
    param("heads", DIM, doc="Number of attention heads."),
    param(
        "d_memory",
        optional(DIM),
        None,
        "Width of the memory the keys and values are projected from; none means d.",
    ),
    param("dropout", RATE, 0.0, "Dropout rate on the attention weights during training."),
    param(
        "head_dim",
        optional(DIM),
        None,
        "Width of each head's queries, keys and values; none means d / heads.",
    ),
    param("bias", BOOL, True, "Learn bias vectors in the query/key/value/output projections."),
    positional=("d", "heads"),
    relations=(HEADS_DIVIDE_D,),
)

# --- recurrent and convolutional layers --------------------------------------------------------

declare(
    NAMESPACE,
    "LSTM",
    "Stack of LSTM layers over time: [B, T, d_in] -> [B, T, d_hidden], or "
    "[B, T, 2 * d_hidden] when bidirectional (forward and backward outputs concatenated).",
    param("d_in", DIM, doc="Width of the input."),
    param("d_hidden", DIM, doc="Width of each direction's hidden and cell state."),
    param("bidirectional", BOOL, False, "Also run a backward LSTM and concatenate both outputs."),
    param("layers", DIM, 1, "Number of stacked LSTM layers."),
    param("dropout", RATE, 0.0, "Dropout rate between stacked layers during training."),
    positional=("d_in", "d_hidden"),
)

declare(
    NAMESPACE,
    "GRU",
    "Stack of GRU layers over time: [B, T, d_in] -> [B, T, d_hidden], or "
    "[B, T, 2 * d_hidden] when bidirectional (forward and backward outputs concatenated).",
    param("d_in", DIM, doc="Width of the input."),
    param("d_hidden", DIM, doc="Width of each direction's hidden state."),
    param("bidirectional", BOOL, False, "Also run a backward GRU and concatenate both outputs."),
    param("layers", DIM, 1, "Number of stacked GRU layers."),
    param("dropout", RATE, 0.0, "Dropout rate between stacked layers during training."),
    positional=("d_in", "d_hidden"),
)

declare(
    NAMESPACE,
    "Conv1D",
    "1-D convolution over time: [B, T, d_in] -> [B, ceil(T / stride), d_out], then an "
    "optional activation.",
    param("d_in", DIM, doc="Width of the input (channels)."),
    param("d_out", DIM, doc="Width of the output (filters)."),
    param("width", DIM, doc="Number of time steps each filter covers."),
    param("stride", DIM, 1, "Step between filter positions along time."),
    param("causal", BOOL, False, "Pad only on the left so step t sees no later steps."),
    param("bias", BOOL, True, "Learn a bias vector."),
    param("activation", ACTIVATION, "none", "Elementwise function applied to the output."),
    positional=("d_in", "d_out", "width"),
)

# --- output ------------------------------------------------------------------------------------

declare(
    NAMESPACE,
    "Softmax",
    "Projects to vocabulary logits: [B, T, d] -> [B, T, vocab]. The loss applies the "
    "normalisation, so sampled losses can skip the full softmax.",
    param("vocab", DIM, doc="Number of output classes (token ids)."),
    param("d", DIM, doc="Width of the input."),
    param(
        "tie",
        optional(LAYER),
        None,
        "Share weights with this Embedding layer (its table, transposed); none for own weights.",
    ),
    param("bias", BOOL, True, "Learn a per-class bias added to the logits."),
    positional=("vocab", "d"),
)
