"""Built-in kinds for training and evaluation: optimizers, schedules, losses, metrics, decoders.

Why these are kinds and not free-form dicts: a `train` or `task` block names them by call
(`adam(lr = warmup_rsqrt(1.0, 4000))`, `beam(4)`), and the checker needs each one's params to
report a misspelt field or a wrong type at the spec line, not as a backend crash mid-run.

Namespaces:
- "optimizer": update rules; `lr` is a float or a "schedule" call.
- "schedule": learning rate as a function of the step.
- "loss": training objectives over the model's output logits, including sampled ones that
  avoid the full softmax for large vocabularies.
- "metric": numbers reported on dev/test data.
- "decode": how a trained sequence model generates output.
- "warp": a speech decode's test-time voice normalisation.
- "proposal": the distribution a sampled loss draws candidate words from.

A default that is itself a kind is written as a string naming the kind (e.g. a `train` block's
optimizer defaults to "adam"); only kinds whose params all have defaults can be named that way.

Ranges: learning rates and schedule values are finite and >= 0 (every float is finite), decay
rates of running means are in [0, 1), stability terms (eps) are > 0, step counts that divide
are > 0, decoding knobs are where sampling is defined (temperature > 0, top_p in (0, 1]).
"""

from __future__ import annotations

from typing import Final

from seqc.spec.kinds import REGISTRY, declare, increasing, one_more, param
from seqc.spec.types import (
    BOOL,
    FLOAT,
    FRACTION,
    INT,
    NON_NEGATIVE,
    POSITIVE,
    STR,
    Type,
    between,
    kind,
    list_of,
    map_of,
    one_of,
    optional,
    union,
)

RATE: Final[Type] = FLOAT.within(NON_NEGATIVE)
"""A learning rate or a penalty: a finite float >= 0."""

LR: Final[Type] = union(RATE, kind("schedule"))
"""A learning rate: a constant float or a schedule call."""

DECAY: Final[Type] = FLOAT.within(FRACTION)
"""The decay rate of a running mean (Adam's betas, momentum): in [0, 1)."""

EPS: Final[Type] = FLOAT.within(POSITIVE)
"""A term added to a denominator for stability: > 0."""

COUNT: Final[Type] = INT.within(POSITIVE)
"""A number of steps, samples or tokens: an int > 0."""

NATURAL: Final[Type] = INT.within(NON_NEGATIVE)
"""A count where 0 means none (warmup steps, top_k), a step number or a seed: an int >= 0."""

REGISTRY.docs.update(
    {
        "optimizer": "Update rules for the `optimizer` field of a train block.",
        "schedule": "Learning rates as a function of the training step, for an optimizer's lr.",
        "loss": "Training objectives for the `loss` field of a task.",
        "metric": "Evaluation numbers for the `metrics` list of a task.",
        "decode": "Generation strategies for the `decode` field of a task.",
        "proposal": "Distributions that sampled losses draw their candidate words from.",
        "init": "Where a warm start (`train.init_from`) takes its initial weights from.",
        "warp": "Test-time speaker normalisation for the `warp` of a speech task's decode.",
    }
)

_LR_DOC = "Learning rate: a float, or a schedule such as warmup_rsqrt(1.0, 4000)."

# --- optimizers --------------------------------------------------------------------------------

declare(
    "optimizer",
    "adam",
    "Adam (Kingma & Ba): per-weight steps from running means of the gradient and its square.",
    param("lr", LR, 1e-3, _LR_DOC),
    param("beta1", DECAY, 0.9, "Decay rate of the running mean of gradients."),
    param("beta2", DECAY, 0.999, "Decay rate of the running mean of squared gradients."),
    param("eps", EPS, 1e-8, "Added to the denominator for numerical stability."),
    param("weight_decay", RATE, 0.0, "L2 penalty added to the gradient (coupled, not AdamW)."),
    param(
        "lazy_rows",
        BOOL,
        False,
        "Update only the rows of a table that the step gathered (an embedding, or a sampled "
        "criterion's output matrix), as TF's LazyAdam: other rows keep their moments.",
    ),
    positional=("lr",),
)

declare(
    "optimizer",
    "adamw",
    "AdamW (Loshchilov & Hutter): Adam with weight decay applied to the weights directly.",
    param("lr", LR, 1e-3, _LR_DOC),
    param("beta1", DECAY, 0.9, "Decay rate of the running mean of gradients."),
    param("beta2", DECAY, 0.999, "Decay rate of the running mean of squared gradients."),
    param("eps", EPS, 1e-8, "Added to the denominator for numerical stability."),
    param("weight_decay", RATE, 0.01, "Fraction of each weight removed per step, times lr."),
    positional=("lr",),
)

declare(
    "optimizer",
    "sgd",
    "Stochastic gradient descent, optionally with (Nesterov) momentum.",
    param("lr", LR, 0.1, _LR_DOC),
    param("momentum", DECAY, 0.0, "Decay rate of the velocity; 0 for plain SGD."),
    param("nesterov", BOOL, False, "Use Nesterov momentum (look-ahead gradient)."),
    param("weight_decay", RATE, 0.0, "L2 penalty added to the gradient."),
    positional=("lr",),
)

declare(
    "optimizer",
    "adagrad",
    "Adagrad: per-weight steps scaled by the root of the summed squared gradients; suits "
    "sparse embedding updates.",
    param("lr", LR, 0.1, _LR_DOC),
    param(
        "initial_accumulator",
        FLOAT,
        0.1,
        "Starting value of each squared-gradient sum.",
        range=NON_NEGATIVE,
    ),
    param("eps", EPS, 1e-7, "Added to the denominator for numerical stability."),
    positional=("lr",),
)

declare(
    "optimizer",
    "adafactor",
    "Adafactor (Shazeer & Stern): Adam-like steps with factored second moments, so matrix "
    "weights need O(rows + cols) optimizer memory.",
    param("lr", LR, 1e-2, _LR_DOC),
    param(
        "decay_rate",
        FLOAT,
        0.8,
        "Exponent of the step-dependent second-moment decay.",
        range=NON_NEGATIVE,
    ),
    param(
        "beta1",
        optional(DECAY),
        None,
        "Decay rate of a first-moment (momentum) average; none keeps no first moment.",
    ),
    param(
        "clip_threshold", FLOAT, 1.0, "Clip each update to this root mean square.", range=POSITIVE
    ),
    param("factored", BOOL, True, "Factor second moments of matrices into row and column sums."),
    param(
        "scale_by_weight",
        BOOL,
        True,
        "Scale each step by the root mean square of the weight it updates.",
    ),
    positional=("lr",),
)

# --- schedules ---------------------------------------------------------------------------------

declare(
    "schedule",
    "constant",
    "The same value at every step.",
    param("value", RATE, doc="The learning rate."),
)

declare(
    "schedule",
    "warmup_rsqrt",
    "Rises linearly from 0 to `peak` over `warmup` steps, then decays as "
    "peak * sqrt(warmup / step) (the Transformer schedule).",
    param("peak", RATE, doc="Learning rate at the end of warmup."),
    param("warmup", NATURAL, doc="Number of warmup steps."),
)

declare(
    "schedule",
    "linear_warmup",
    "Rises linearly from 0 to `peak` over `warmup` steps, then stays at `peak`.",
    param("peak", RATE, doc="Learning rate at the end of warmup and after it."),
    param("warmup", NATURAL, doc="Number of warmup steps."),
)

declare(
    "schedule",
    "cosine",
    "Optional linear warmup to `peak`, then a half cosine from `peak` down to `final`.",
    param("peak", RATE, doc="Learning rate at the end of warmup."),
    param("warmup", NATURAL, 0, "Number of linear warmup steps; 0 starts at peak."),
    param(
        "decay_steps",
        optional(COUNT),
        None,
        "Steps after warmup over which to decay; none means the rest of the training run.",
    ),
    param("final", RATE, 0.0, "Learning rate at the end of the decay and after it."),
    positional=("peak",),
)

declare(
    "schedule",
    "linear_decay",
    "Optional linear warmup to `peak`, then a straight line from `peak` down to `final`.",
    param("peak", RATE, doc="Learning rate at the end of warmup."),
    param("warmup", NATURAL, 0, "Number of linear warmup steps; 0 starts at peak."),
    param(
        "decay_steps",
        optional(COUNT),
        None,
        "Steps after warmup over which to decay; none means the rest of the training run.",
    ),
    param("final", RATE, 0.0, "Learning rate at the end of the decay and after it."),
    positional=("peak",),
)

declare(
    "schedule",
    "exponential",
    "Starts at `initial` and is multiplied by `rate` every `every` steps.",
    param("initial", RATE, doc="Learning rate at step 0."),
    param("rate", FLOAT, doc="Factor applied per period, e.g. 0.5 to halve.", range=POSITIVE),
    param("every", COUNT, doc="Length of one period in steps."),
    param("staircase", BOOL, False, "Apply the factor in whole periods instead of smoothly."),
)

declare(
    "schedule",
    "piecewise",
    "Constant pieces: values[i] until step boundaries[i], then the last value.",
    param("boundaries", list_of(NATURAL), doc="Increasing steps at which the value changes."),
    param("values", list_of(FLOAT), doc="One more value than boundaries."),
    relations=(
        one_more("values", "boundaries", hint="values[i] holds until boundaries[i]"),
        increasing("boundaries"),
    ),
)

# --- losses ------------------------------------------------------------------------------------

declare(
    "loss",
    "cross_entropy",
    "Negative log-likelihood of the target tokens under the full softmax over the vocabulary.",
    param(
        "label_smoothing",
        FLOAT,
        0.0,
        "Mass moved from the target token to a uniform distribution over the vocabulary.",
        range=FRACTION,
    ),
    param(
        "reduction",
        one_of("token", "sequence"),
        "token",
        "Average over all target tokens, or sum per sequence then average over sequences.",
    ),
    positional=(),
)

declare(
    "loss",
    "ctc",
    "Connectionist temporal classification (Graves et al., 2006): the negative log of the "
    "total probability of every frame alignment of the transcript, blanks (id 0, the padding "
    "id) between and around its tokens. The model returns per-frame logits and the frames' "
    "mask: `return out(x), mask`.",
    param(
        "reduction",
        one_of("token", "sequence"),
        "token",
        "Divide the summed loss by the transcript tokens, or by the utterances.",
    ),
    positional=(),
)

declare(
    "loss",
    "joint_ctc",
    "Joint CTC + attention (Kim, Hori & Watanabe, 2017) for an encoder-decoder over audio: "
    "(1 - ctc_weight) x the decoder's cross-entropy + ctc_weight x CTC over the encoder's "
    "frames. The model returns the decoder's logits, the frame logits and the frames' mask: "
    "`return out(h), ctc_out(memory), mask`. Evaluation, decoding and export use the decoder.",
    param("ctc_weight", FLOAT, 0.3, "Weight of the CTC term.", range=FRACTION),
    param(
        "label_smoothing",
        FLOAT,
        0.0,
        "Label smoothing of the decoder's cross-entropy.",
        range=FRACTION,
    ),
    positional=(),
)

_SAMPLES_DOC = (
    "K: candidate words drawn per training step, with replacement, one set shared by the batch."
)
_PROPOSAL_DOC = "The distribution the candidates are drawn from (a `proposal` call)."
_HITS_DOC = (
    "Drop candidates equal to a position's target from its normaliser. Off by default: kept "
    "hits make the criterion's optimum exact at every K (../shared/research/snis.md)."
)

declare(
    "loss",
    "sampled_softmax",
    "Importance-sampled softmax (Bengio & Senecal; Jean et al.): cross-entropy over the target "
    "and K sampled candidates, each logit corrected by log(K Q); a full softmax at evaluation.",
    param("samples", COUNT, doc=_SAMPLES_DOC),
    param("proposal", kind("proposal"), "log_uniform", _PROPOSAL_DOC),
    param("remove_accidental_hits", BOOL, False, _HITS_DOC),
    positional=("samples",),
)

declare(
    "loss",
    "nce",
    "Noise-contrastive estimation (Mnih & Teh): the target against K noise words by logistic "
    "regression on s - log(K Q); its optimum exp(s) = p is self-normalised.",
    param("samples", COUNT, doc=_SAMPLES_DOC),
    param("proposal", kind("proposal"), "unigram", _PROPOSAL_DOC),
    param("remove_accidental_hits", BOOL, False, _HITS_DOC),
    positional=("samples",),
)

declare(
    "loss",
    "snis",
    "Self-normalised importance sampling (Yang et al., 2022). Variant B: -s_target + "
    "(1/K) sum exp(s)/Q - 1, an unbiased estimate of an upper bound of cross-entropy whose "
    "optimum is exp(s) = p (no softmax needed to score). Variant A: the self-normalised "
    "importance-sampling estimate of the gradient (the sampled softmax); full softmax to score.",
    param("samples", COUNT, doc=_SAMPLES_DOC),
    param("proposal", kind("proposal"), "unigram", _PROPOSAL_DOC),
    param("variant", one_of("A", "B"), "B", "Which reading of SNIS (see the description)."),
    param("remove_accidental_hits", BOOL, False, _HITS_DOC),
    positional=("samples",),
)

declare(
    "proposal",
    "uniform",
    "Every word equally likely.",
)

declare(
    "proposal",
    "unigram",
    "Word frequencies of the training data raised to `power` (0.75 is word2vec's smoothing), "
    "counted once per tokenizer; a word never seen counts 1.",
    param("power", FLOAT.within(NON_NEGATIVE), 0.75, "Exponent on the counts; 0 is uniform."),
    positional=("power",),
)

declare(
    "proposal",
    "log_uniform",
    "Zipf over ids: P(k) = log((k+2)/(k+1)) / log(V+1). A good proposal only where ids are "
    "sorted by falling frequency (a run says so when they are not).",
)

# --- metrics -----------------------------------------------------------------------------------

declare(
    "metric",
    "perplexity",
    "exp of the mean per-token negative log-likelihood under the full softmax.",
)

declare(
    "metric",
    "accuracy",
    "Fraction of target tokens (or whole sequences) the model's argmax gets right.",
    param(
        "level",
        one_of("token", "sequence"),
        "token",
        "Count single tokens, or sequences that are right at every position.",
    ),
    positional=(),
)

declare(
    "metric",
    "loss",
    "The task's training loss, computed on the evaluation data.",
)

declare(
    "metric",
    "bleu",
    "Corpus BLEU (sacreBLEU conventions) of decoded output against the references.",
    param(
        "tokenize",
        one_of("13a", "intl", "char", "none"),
        "13a",
        "Tokenisation applied to hypotheses and references before matching n-grams.",
    ),
    param("lowercase", BOOL, False, "Lowercase hypotheses and references first."),
    positional=(),
)

declare(
    "metric",
    "chrf",
    "chrF (Popović): F-score of character n-grams of decoded output against the references.",
    param("char_order", COUNT, 6, "Longest character n-gram."),
    param("word_order", NATURAL, 0, "Longest word n-gram; 2 gives chrF++."),
    param("beta", FLOAT, 2.0, "Weight of recall relative to precision.", range=NON_NEGATIVE),
    positional=(),
)

declare(
    "metric",
    "wer",
    "Word error rate of decoded transcripts (jiwer): substitutions, deletions and insertions "
    "over the reference words, summed over the corpus, in percent.",
)

declare(
    "metric",
    "cer",
    "Character error rate of decoded transcripts (jiwer), like `wer` over characters.",
)

# --- decoders ----------------------------------------------------------------------------------

_MAX_LENGTH_DOC = "Stop after this many output tokens if no end-of-sequence is produced."

_WARP_DOC = (
    "Speech: test-time voice normalisation, a `voice_warp(...)` call (each speaker's audio "
    "resampled by the factor the model is most confident under); none: the audio as it is."
)

declare(
    "decode",
    "greedy",
    "Takes the most likely token at each step (for a CTC model: at each frame, then merges "
    "repeats and drops blanks).",
    param("max_length", COUNT, 64, _MAX_LENGTH_DOC),
    param("warp", optional(kind("warp")), None, _WARP_DOC),
    positional=(),
)

declare(
    "decode",
    "sample",
    "Draws each token from the model's distribution, reshaped by temperature, top-k and top-p.",
    param(
        "temperature",
        FLOAT,
        1.0,
        "Divide logits by this; below 1 sharpens, above 1 flattens.",
        range=POSITIVE,
    ),
    param("top_k", NATURAL, 0, "Sample only among the k most likely tokens; 0 for no limit."),
    param(
        "top_p",
        FLOAT,
        1.0,
        "Sample only among the most likely tokens whose mass reaches p (nucleus); 1 for all.",
        range=between(0, 1, low_open=True),
    ),
    param("max_length", COUNT, 64, _MAX_LENGTH_DOC),
    param("seed", NATURAL, 0, "Random seed, so decoding is reproducible."),
    positional=(),
)

declare(
    "decode",
    "beam",
    "Beam search keeping the `width` best partial outputs, ranked by length-normalised "
    "log-probability (GNMT penalty ((5 + len) / 6) ^ alpha). For a CTC model, the prefix "
    "beam search over frames (the length penalty does not apply).",
    param("width", COUNT, 4, "Number of hypotheses kept at each step."),
    param(
        "length_penalty",
        FLOAT,
        0.6,
        "Exponent alpha of the length penalty; 0 disables it.",
        range=NON_NEGATIVE,
    ),
    param("max_length", COUNT, 64, _MAX_LENGTH_DOC),
    param(
        "lm",
        optional(STR),
        None,
        "Shallow fusion with a word language model: an exported LM artifact's folder, or the "
        "run directory of a trained `lm` task (its checkpoint); none: no fusion. Speech tasks.",
    ),
    param("lm_weight", RATE, 0.3, "Shallow fusion: the weight of the LM's log-probability."),
    param("length_bonus", FLOAT, 1.0, "Shallow fusion: added to a hypothesis's score per word."),
    param("warp", optional(kind("warp")), None, _WARP_DOC),
    positional=("width",),
)

declare(
    "warp",
    "voice_warp",
    "Test-time speaker normalisation, as VTLN estimates a warp per speaker without a "
    "transcript: each speaker's audio is resampled by each candidate factor (below 1 lowers "
    "its formants and pitch and slows it, as speed perturbation does), the model's confidence "
    "is measured on the speaker's first `utterances` utterances (the mean over their frames of "
    "the largest log-posterior), and every utterance of the speaker is transcribed at the "
    "factor of highest confidence. A CTC speech task's decode; training's dev evaluations and "
    "an export's own WER check decode without it.",
    param(
        "factors",
        list_of(FLOAT.within(between(0.5, 2.0))),
        [0.8, 0.84, 0.88, 0.92, 0.96, 1.0, 1.04, 1.08, 1.12, 1.16, 1.2],
        "The candidate factors, increasing; 1 leaves the audio as it is.",
    ),
    param(
        "by",
        STR,
        "voice",
        "The manifest field naming who speaks (utterances with one value share a factor); "
        '"" chooses for each utterance alone, as `seqc decode` and `seqc serve` do.',
    ),
    param(
        "utterances",
        COUNT,
        100,
        "A speaker's utterances (the first, in split order) the factor is chosen on.",
    ),
    positional=(),
    relations=(increasing("factors", hint="list the factors in increasing order"),),
)

# --- warm starts -------------------------------------------------------------------------------

declare(
    "init",
    "checkpoint",
    "The tensors of another run's checkpoint (either backend's), loaded by layer-path patterns: "
    "each `map` entry takes the checkpoint's tensors matching the key (a glob; `*` matches "
    "within and across dots) to the model's params named by the value, `*` standing for what "
    "the key's `*` matched. Params no entry reaches are initialised fresh.",
    param("path", STR, doc="A run directory or a checkpoints folder, relative to the spec."),
    param(
        "map",
        map_of(STR, STR),
        {"*": "*"},
        'Checkpoint pattern: model pattern, e.g. {"encoder.*": "encoder.*"}; default every tensor.',
    ),
    param("step", optional(NATURAL), None, "The checkpoint's step; none takes the newest."),
    positional=("path",),
)
