"""Built-in kinds for reading and tokenising data (namespaces "reader" and "tokenizer").

Why declared here: an `input` block names its readers and tokenizer by call
(`train = tsv("data/train.tsv", source = 0, target = 1)`), and the front end checks those calls
before anything is read, so a wrong column or a misspelt option fails at the spec line.

A reader yields examples with a source sequence and, for sequence-to-sequence tasks, a target
sequence; language models use the source only. An audio reader yields a wav file and its
transcript (speech recognition). A tokenizer is fitted on the train reader's
text (or loaded) and turns text into token ids.
"""

from __future__ import annotations

from typing import Final

from seqc.spec.kinds import REGISTRY, Relation, declare, param
from seqc.spec.types import (
    BOOL,
    FLOAT,
    INT,
    NON_NEGATIVE,
    POSITIVE,
    STR,
    Type,
    between,
    list_of,
    one_of,
    optional,
)

REGISTRY.docs.update(
    {
        "reader": "Data files for the train/dev/test fields of an input block.",
        "tokenizer": "Text-to-token-id mappings for the tokenizer field of an input block.",
    }
)

_PATH_DOC = (
    "File path or glob pattern; relative paths are looked up next to the spec file first, "
    "then in the working directory (where `seqc data prepare` writes)."
)
_ENCODING_DOC = "Text encoding of the file."

COLUMN: Final[Type] = INT.within(NON_NEGATIVE)
"""A 0-based column index."""

VOCAB: Final[Type] = INT.within(POSITIVE)
"""A vocabulary size: an int > 0."""

MIN_COUNT: Final[Type] = INT.within(NON_NEGATIVE)
"""How often a token must be seen to be kept; 0 and 1 both keep every token seen."""

SP_MODEL_TYPES: Final[tuple[str, ...]] = ("unigram", "bpe", "char", "word")
"""Segmentation algorithms SentencePiece can train."""

# --- readers -----------------------------------------------------------------------------------

declare(
    "reader",
    "text",
    "Plain text, one example per line; the line is the source sequence (no target).",
    param("path", STR, doc=_PATH_DOC),
    param("encoding", STR, "utf-8", _ENCODING_DOC),
    param("skip_empty", BOOL, True, "Drop blank lines instead of yielding empty examples."),
    positional=("path",),
)

declare(
    "reader",
    "tsv",
    "Tab-separated (or other delimiter) columns, one example per line; the source and target "
    "are taken from columns by index.",
    param("path", STR, doc=_PATH_DOC),
    param("source", COLUMN, 0, "0-based index of the source column."),
    param(
        "target",
        optional(COLUMN),
        1,
        "0-based index of the target column; none for source-only data.",
    ),
    param("delimiter", STR, "\t", "Column separator (one character)."),
    param("header", BOOL, False, "Skip the first line as a header."),
    param("encoding", STR, "utf-8", _ENCODING_DOC),
    positional=("path",),
)

declare(
    "reader",
    "jsonl",
    "JSON Lines, one object per line; the source and target are taken from fields by name.",
    param("path", STR, doc=_PATH_DOC),
    param("source", STR, "source", "Name of the field holding the source text."),
    param(
        "target",
        optional(STR),
        "target",
        "Name of the field holding the target text; none for source-only data.",
    ),
    param("encoding", STR, "utf-8", _ENCODING_DOC),
    positional=("path",),
)

declare(
    "reader",
    "audio_manifest",
    "Speech: JSON Lines, one utterance per line, a wav file and its transcript (the target; the "
    "tokenizer is fitted on transcripts). Wavs are 16-bit PCM mono at `sample_rate`; relative "
    "wav paths are relative to the manifest's folder. With this reader, the input block's "
    "`buckets` bounds and `max_length` are in seconds of audio.",
    param("path", STR, doc=_PATH_DOC),
    param("audio", STR, "audio", "Name of the field holding the wav file's path."),
    param("text", STR, "text", "Name of the field holding the transcript."),
    param(
        "sample_rate",
        INT.within(POSITIVE),
        16000,
        "Samples per second every wav must have (resample others with "
        "`sox -D in.wav -r 16000 -c 1 -b 16 out.wav`).",
    ),
    param("encoding", STR, "utf-8", "Text encoding of the manifest."),
    positional=("path",),
)

# --- tokenizers --------------------------------------------------------------------------------

declare(
    "tokenizer",
    "sentencepiece",
    "SentencePiece subword model, trained on the train reader's text unless `model` is given.",
    param("vocab_size", VOCAB, 8000, "Number of subword pieces, including special tokens."),
    param(
        "model_type",
        one_of(*SP_MODEL_TYPES),
        "unigram",
        "Segmentation algorithm: unigram LM, BPE, characters or whitespace words.",
    ),
    param(
        "character_coverage",
        FLOAT,
        1.0,
        "Fraction of characters the model covers; lower (e.g. 0.9995) for large scripts.",
        range=between(0, 1, low_open=True),
    ),
    param(
        "model",
        optional(STR),
        None,
        "Path of an existing .model file to load instead of training one.",
    ),
    positional=(),
)

declare(
    "tokenizer",
    "chars",
    "One token per Unicode character seen in the training text.",
    param("lowercase", BOOL, False, "Lowercase text before tokenising."),
    param("min_count", MIN_COUNT, 1, "Characters seen fewer times become the unknown token."),
    positional=(),
)

declare(
    "tokenizer",
    "words",
    "One token per whitespace-separated word, keeping the most frequent words.",
    param("vocab_size", VOCAB, 20000, "Most words kept, including special tokens."),
    param("min_count", MIN_COUNT, 1, "Words seen fewer times become the unknown token."),
    param("lowercase", BOOL, False, "Lowercase text before tokenising."),
    positional=(),
)

declare(
    "tokenizer",
    "bytes",
    "One token per UTF-8 byte (256 ids plus special tokens); needs no training.",
)

# --- augmentation ------------------------------------------------------------------------------

REGISTRY.docs["augment"] = (
    "Augmentation of an audio input's training utterances, in the input block's `augment` list: "
    "applied on the host to the train split only, each utterance's draws seeded by the input's "
    "seed, the step and the utterance, so a resumed run sees the same batches."
)

declare(
    "augment",
    "speed",
    "Speed perturbation: each training utterance resampled to play `factor` times as fast "
    "(lasting 1 / factor as long, its pitch and formants moved by the factor), the factor one "
    "of `rates` (with `range = true`, drawn uniformly between the lowest and highest), with "
    "probability `p`. A factor that would lengthen an utterance past its bucket's bound is "
    "raised to what the bound allows.",
    param(
        "rates",
        list_of(FLOAT.within(between(0.5, 2.0))),
        [0.9, 1.0, 1.1],
        "Speed factors to draw from (0.5 to 2).",
    ),
    param("p", FLOAT.within(between(0.0, 1.0)), 1.0, "Probability an utterance is perturbed."),
    param("range", BOOL, False, "Draw uniformly between the lowest and highest rate."),
    positional=("rates",),
    relations=(
        Relation(
            "rates is not empty",
            ("rates",),
            lambda rates: len(rates) > 0,
            "rates",
            hint="give at least one factor, such as [0.9, 1.0, 1.1]",
        ),
    ),
)

declare(
    "augment",
    "noise",
    "Additive noise: generated noise of a `colour` (white, pink: power falling as 1/f, brown: "
    "1/f^2) mixed into a training utterance at a signal-to-noise ratio drawn uniformly from "
    "`snr` (decibels, [low, high]), with probability `p`.",
    param("snr", list_of(FLOAT), [10.0, 30.0], "[low, high] signal-to-noise ratio, in dB."),
    param("colour", one_of("white", "pink", "brown"), "white", "Spectrum of the noise."),
    param("p", FLOAT.within(between(0.0, 1.0)), 0.5, "Probability an utterance gets noise."),
    positional=("snr",),
    relations=(
        Relation(
            "snr is [low, high] with low <= high",
            ("snr",),
            lambda snr: len(snr) == 2 and snr[0] <= snr[1],
            "snr",
            hint="give two numbers, the lower first: snr = [10, 30]",
        ),
    ),
)

declare(
    "augment",
    "reverb",
    "Reverberation: a training utterance convolved with the impulse response of a simulated "
    "room (pyroomacoustics' image source method: a shoebox room, a source and a microphone at "
    "random places), its reverberation time drawn uniformly from `rt60` (seconds, [low, "
    "high]), with probability `p`. `rooms` responses are simulated once per process from the "
    "input's seed; each utterance picks one. The direct sound keeps its time and the "
    "utterance its length and loudness.",
    param("rt60", list_of(FLOAT.within(between(0.05, 2.0))), [0.2, 0.7], "[low, high] seconds."),
    param("p", FLOAT.within(between(0.0, 1.0)), 0.3, "Probability an utterance is reverberated."),
    param("rooms", INT.within(between(1, 256)), 16, "Simulated rooms to draw from."),
    positional=("rt60",),
    relations=(
        Relation(
            "rt60 is [low, high] with low <= high",
            ("rt60",),
            lambda rt60: len(rt60) == 2 and rt60[0] <= rt60[1],
            "rt60",
            hint="give two reverberation times in seconds, the lower first: rt60 = [0.2, 0.7]",
        ),
    ),
)
