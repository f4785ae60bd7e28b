"""From a resolved `input` block to batches of token ids.

`InputPipeline(config)` reads the train/dev/test splits, builds the tokenizer from the train
split, tokenises everything once, and plans batches per split with `BucketBatcher`. What comes
out is `Batch`es of numpy int32 ids and bool masks (see `seqc.data.batch` for the fields).

Choices worth knowing:

- The task follows the train reader: a reader with a target column/field gives
  sequence-to-sequence batches, a `text` reader (or `target = none`) language-model batches.
- Sequence to sequence: one tokenizer is trained on source and target text together (one shared
  vocabulary, as the examples' tied embeddings expect) unless `target_tokenizer` is given, in
  which case each side gets its own. The source ends with eos; the decoder reads bos + target
  and predicts target + eos. An example's length for bucketing is the longer of the two sides,
  and both sides are padded to the bucket bound.
- Language modelling on a `text` reader packs lines by default: the train text becomes one
  stream, bos + line 1 + eos + line 2 + eos + ..., cut into chunks of the largest bucket's bound
  (capped by `max_length`), the inputs and targets of a chunk being the stream shifted by one.
  Why: corpora such as Shakespeare have lines of ~10 tokens, so line-per-example batches would
  never show the model more than one short line of context, and most of every bucket above the
  smallest would go unused. `pack=False` gives one line per example (bos + line, line + eos).
- Speech recognition follows an audio train reader (`audio_manifest`): the tokenizer is fitted
  on the transcripts, `buckets` bounds and `max_length` are seconds of audio (turned into
  samples at the reader's sample rate; no buckets means one bucket as long as the longest
  training utterance, rounded up to a second), and batches carry the padded waveform, the
  decoder's target framing and CTC's labels (`seqc.data.batch`). The transcripts' padded length
  L is fixed per split, from the train split's longest (and the split's own, if longer), so
  token arrays never change shape between batches. Waveforms are read from disk per batch,
  not held in memory: a few milliseconds a batch, flat memory whatever the corpus size (8,000
  utterances are ~0.5 GB as int16, 1 GB as float32), no start-up cost, and the OS page cache
  keeps a corpus that fits in RAM there after the first epoch anyway.
- Speech: an utterance shorter than the model's shortest input (`require_samples`, called once
  the model is compiled) is an error at its manifest line, listing every other one, in any
  split. Not a counted drop as `max_length`'s: such a clip (an empty or cut-short wav, in
  practice) has no frame to carry its transcript, dev and test must score every utterance, and
  a user who chose the corpus should decide what to do with it, not learn of it from a count.
- `max_length` drops long *training* examples. Dev and test keep every example: those longer
  than the largest bucket go into one extra, larger bucket, so evaluation covers the whole split.
- Train batches are shuffled (seeded by the block's `seed` and the epoch) and repeat forever;
  dev and test batches come once, in file order. Every batch has its bucket's batch size as its
  row count; the last batch of a bucket is filled with padding rows (mask False).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from seqc.data.audio import read_wav, to_float, too_short
from seqc.data.batch import Batch, TaskKind
from seqc.data.bucketing import (
    DEFAULT_BATCH_SIZE,
    Bucket,
    BucketBatcher,
    make_audio_buckets,
    make_buckets,
    pad,
    seconds_to_samples,
)
from seqc.data.calls import call_args, kind_spec
from seqc.data.errors import DataError
from seqc.data.proposal import count_tokens
from seqc.data.readers import BaseDirs, Example, has_target, is_audio, read_examples, spec_bases
from seqc.data.report import DropReport
from seqc.data.tokenizers import Tokenizer, build_tokenizer, fingerprint
from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.values import CallValue

SPLITS: tuple[str, ...] = ("train", "dev", "test")
DEFAULT_CACHE_DIR = Path(".cache") / "tokenizers"
"""Where trained tokenizers are kept, relative to the cwd unless given."""
LABEL_MULTIPLE = 8
"""Speech: the padded transcript length L is a multiple of this (fewer distinct shapes)."""


def label_bound(longest: int) -> int:
    """Speech: L for transcripts of at most `longest` tokens: the smallest multiple of
    `LABEL_MULTIPLE` that holds the longest plus its bos (or eos)."""
    return LABEL_MULTIPLE * math.ceil((longest + 1) / LABEL_MULTIPLE)


@dataclass
class SplitData:
    """One split, tokenised: the sequences batches are cut from, and its batch planner."""

    name: str
    examples: list[Example]
    """What was read, in file order (kept for references in metrics and for locations)."""
    first: list[np.ndarray]
    """Per sequence: LM input ids (bos + tokens), the seq2seq source (tokens + eos), or the
    speech transcript's tokens (CTC's labels)."""
    second: list[np.ndarray]
    """Per sequence: LM target ids (tokens + eos) or the decoder input (bos + target)."""
    third: list[np.ndarray] | None
    """Seq2seq and speech: decoder targets (target + eos)."""
    origin: list[int]
    """Per sequence: the index of the example it starts in (a packed chunk spans several)."""
    batcher: BucketBatcher
    drops: DropReport = field(default_factory=DropReport)
    label_length: int = 0
    """Speech: L, the padded length of every token array of this split's batches."""

    @property
    def audio_seconds(self) -> float:
        """Speech: seconds of audio read (before drops); 0 for text."""
        return sum(e.audio.duration for e in self.examples if e.audio is not None)

    @property
    def size(self) -> int:
        """Sequences that batches are made of (after packing, after drops)."""
        return self.batcher.num_examples


class InputPipeline:
    """Batches of one `input` block, built from its resolved config."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        base_dir: BaseDirs | None = None,
        cache_dir: Path | None = None,
        default_batch_size: int = DEFAULT_BATCH_SIZE,
        pack: bool | None = None,
        splits: Sequence[str] = SPLITS,
    ) -> None:
        """`config` is a task's resolved `input` dict; `base_dir` what relative paths are
        relative to (one dir or several tried in order); `pack` None packs `text` LM corpora."""
        cfg = _with_defaults(config)
        self.name: str = str(cfg.get("name", "input"))
        self.config = cfg
        self.base_dir = base_dir
        self.cache_dir = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR
        self.seed = int(cfg["seed"])
        self.shuffle_buffer = int(cfg["shuffle_buffer"])
        self.lowercase = bool(cfg["lowercase"])
        train_reader: CallValue = cfg["train"]
        self.task: TaskKind = (
            "asr" if is_audio(train_reader) else "seq2seq" if has_target(train_reader) else "lm"
        )
        self.sample_rate: int | None = (
            int(call_args(train_reader)["sample_rate"]) if self.task == "asr" else None
        )
        """Speech: samples per second of every wav; None for text."""
        self.max_length: int
        """Longest training example kept: tokens, or samples for speech."""
        self.buckets: tuple[Bucket, ...]
        """Bounds in tokens, or in samples for speech."""
        if self.sample_rate is None:
            self.max_length = int(cfg["max_length"])
            self.buckets = make_buckets(cfg["buckets"], self.max_length, default_batch_size)
        else:
            self.max_length = seconds_to_samples(cfg["max_length"], self.sample_rate)
        self.packed = (
            (self.task == "lm" and train_reader.kind == "text") if pack is None else bool(pack)
        )
        if self.packed and self.task != "lm":
            raise DataError("packing applies to language modelling only", code="bad-pack")
        if self.task == "asr" and cfg.get("target_tokenizer") is not None:
            raise DataError(
                "an audio input has one tokenizer, for its transcripts",
                code="bad-tokenizer",
                found="target_tokenizer is set",
                hint="set the transcripts' tokenizer with `tokenizer = ...` and drop "
                "`target_tokenizer`",
            )

        read: dict[str, tuple[list[Example], DropReport]] = {}
        for split in splits:
            reader = cfg.get(split)
            if reader is None:
                continue
            if is_audio(reader) != (self.task == "asr"):
                this = "reads audio" if is_audio(reader) else "reads text"
                train = "does" if self.task == "asr" else "does not"
                raise DataError(
                    f"the {split} reader {this} but the train reader {train}",
                    code="mixed-splits",
                    found=str(reader),
                    hint="give every split of an input block the same kind of reader",
                )
            if self.sample_rate is not None:
                rate = int(call_args(reader)["sample_rate"])
                if rate != self.sample_rate:
                    raise DataError(
                        f"the {split} reader's sample_rate is {rate} Hz, the train reader's "
                        f"{self.sample_rate} Hz",
                        code="mixed-splits",
                        expected=f"{self.sample_rate} Hz, as the model is trained on",
                        found=f"{rate} Hz",
                        hint="resample the split with `sox -D in.wav -r "
                        f"{self.sample_rate} -c 1 -b 16 out.wav`",
                    )
            if self.task != "asr" and has_target(reader) != (self.task == "seq2seq"):
                this = "has a" if has_target(reader) else "has no"
                train = "has one" if self.task == "seq2seq" else "does not"
                raise DataError(
                    f"the {split} reader {this} target but the train reader {train}",
                    code="mixed-splits",
                    found=str(reader),
                    hint="give every split of an input block the same columns or fields",
                )
            drops = DropReport()
            read[split] = (read_examples(reader, base_dir, drops), drops)
        if "train" not in read:
            raise DataError("an input block needs a train split", code="missing-train")

        train_examples = read["train"][0]
        if self.sample_rate is not None:
            self.buckets = make_audio_buckets(
                cfg["buckets"],
                self.sample_rate,
                self._default_audio_bound(train_examples),
                default_batch_size,
            )
        src_texts = [self._norm(e.source) for e in train_examples]
        tgt_texts = [self._norm(e.target or "") for e in train_examples]
        target_call = cfg.get("target_tokenizer")
        if self.task == "asr":
            texts = tgt_texts  # the transcripts: the source is a wav path
        elif self.task == "seq2seq" and target_call is None:
            # A joint tokenizer reads the file's columns in file order, so both directions of
            # one parallel file (source = 1, target = 0 against the other way) train the same
            # model and share its ids (a multi-task model that shares an embedding needs it).
            swapped = train_reader.kind == "tsv" and int(train_reader.args.get("source", 0)) > int(
                train_reader.args.get("target") or 0
            )
            texts = tgt_texts + src_texts if swapped else src_texts + tgt_texts
        else:
            texts = src_texts
        self.tokenizer: Tokenizer = build_tokenizer(
            cfg["tokenizer"], texts, self.cache_dir, base_dir
        )
        self.target_tokenizer: Tokenizer = self.tokenizer
        if self.task == "seq2seq" and target_call is not None:
            self.target_tokenizer = build_tokenizer(
                target_call, tgt_texts, self.cache_dir, base_dir
            )

        self.label_length = 0
        """Speech: L of the train split's batches (dev and test may have a larger one)."""
        done: dict[str, SplitData] = {}
        for split in sorted(read, key=lambda name: name != "train"):  # train fixes L first
            examples, drops = read[split]
            done[split] = self._tokenise(split, examples, drops)
        self.splits: dict[str, SplitData] = {split: done[split] for split in read}

    @classmethod
    def for_task(
        cls,
        experiment: ResolvedExperiment,
        task: str,
        *,
        base_dir: BaseDirs | None = None,
        **kwargs: Any,
    ) -> InputPipeline:
        """The pipeline of one task of a resolved experiment. Relative data paths are looked
        up next to the spec file first, then in the cwd (where `seqc data prepare` writes),
        then, for a spec frozen in a run directory, next to the original (`spec_bases`)."""
        if task not in experiment.tasks:
            raise DataError(
                f"experiment `{experiment.name}` has no task `{task}`",
                code="unknown-task",
                expected=f"one of {', '.join(experiment.tasks)}",
            )
        if base_dir is None:
            base_dir = spec_bases(Path(experiment.file).parent)
        return cls(experiment.config[task]["input"], base_dir=base_dir, **kwargs)

    # ------------------------------------------------------------------------ public

    @property
    def vocab_size(self) -> int:
        """Ids of the (source) tokenizer: the size an embedding table needs."""
        return self.tokenizer.vocab_size

    @property
    def target_vocab_size(self) -> int:
        return self.target_tokenizer.vocab_size

    def target_counts(self, split: str = "train") -> np.ndarray:
        """How often each target id occurs in a split (int64 [target vocab]): what a unigram
        proposal of a sampled loss is made from (`seqc.data.proposal`). Counted from the
        tokenised split in memory, once per call: one bincount, milliseconds for a corpus."""
        data = self._split(split)
        targets = data.third if data.third is not None else data.second
        return count_tokens(targets, self.target_vocab_size)

    @property
    def sizes(self) -> dict[str, int]:
        """Examples read per split (lines or pairs, before packing and drops)."""
        return {name: len(s.examples) for name, s in self.splits.items()}

    @property
    def drops(self) -> dict[str, DropReport]:
        """What each split left out, by reason."""
        return {name: s.drops for name, s in self.splits.items()}

    def steps_per_epoch(self, split: str = "train") -> int:
        return self._split(split).batcher.steps_per_epoch

    def batches(self, split: str = "train", *, start_step: int = 0) -> Iterator[Batch]:
        """Train: shuffled batches forever, from global step `start_step`. Dev/test: one
        pass in file order."""
        data = self._split(split)
        if split == "train":
            plans = data.batcher.iterate(start_step, shuffle=True)
        else:
            plans = data.batcher.epoch(0, shuffle=False)
        for plan in plans:
            yield self._materialise(data, plan.bucket, plan.indices)

    def epoch(
        self, split: str = "train", epoch: int = 0, shuffle: bool | None = None
    ) -> Iterator[Batch]:
        """The batches of one epoch (shuffled by default for train only)."""
        data = self._split(split)
        for plan in data.batcher.epoch(epoch, split == "train" if shuffle is None else shuffle):
            yield self._materialise(data, plan.bucket, plan.indices)

    @property
    def audio_seconds(self) -> dict[str, float]:
        """Speech: seconds of audio read per split (before drops); zeros for text."""
        return {name: s.audio_seconds for name, s in self.splits.items()}

    def bucket_label(self, bucket: Bucket) -> str:
        """A bucket as a user wrote it: `32x128` for tokens, `2s x32` for audio."""
        if self.sample_rate is None:
            return f"{bucket.bound}x{bucket.batch_size}"
        return f"{bucket.bound / self.sample_rate:g}s x{bucket.batch_size}"

    def fingerprint(self) -> dict[str, Any]:
        """What a run records of its data, to refuse a resume or an evaluation whose data is
        not what trained: each tokenizer's identity (`tokenizers.fingerprint`) and each split's
        example count and sha256 of its texts as read (sources and targets, in file order)."""
        out: dict[str, Any] = {"tokenizer": fingerprint(self.tokenizer)}
        if self.target_tokenizer is not self.tokenizer:
            out["target_tokenizer"] = fingerprint(self.target_tokenizer)
        splits = {}
        for name, split in self.splits.items():
            h = hashlib.sha256()
            for e in split.examples:
                h.update(f"{e.source}\t{e.target or ''}\n".encode("utf-8", "surrogatepass"))
            splits[name] = {"examples": len(split.examples), "sha256": h.hexdigest()}
        out["splits"] = splits
        return out

    def summary(self) -> str:
        """A few lines for logs: task, vocabulary, and per split sizes and drops."""
        lines = [
            f"input {self.name}: {self.task}, vocab {self.vocab_size}"
            + ("" if self.target_tokenizer is self.tokenizer else f"/{self.target_vocab_size}")
            + (", packed" if self.packed else "")
            + ("" if self.sample_rate is None else f", {self.sample_rate} Hz")
            + ", buckets "
            + ", ".join(self.bucket_label(b) for b in self.buckets)
        ]
        for name, s in self.splits.items():
            if self.task == "asr":
                lines.append(
                    f"  {name}: {len(s.examples)} utterances ({s.audio_seconds / 3600:.2f} h), "
                    f"{s.size} kept, {s.batcher.steps_per_epoch} batches/epoch, "
                    f"transcripts padded to {s.label_length}; {s.drops}"
                )
                continue
            lines.append(
                f"  {name}: {len(s.examples)} examples, {s.size} sequences, "
                f"{s.batcher.steps_per_epoch} batches/epoch; {s.drops}"
            )
        return "\n".join(lines)

    def require_samples(self, min_samples: int) -> None:
        """Every utterance of every split holds at least `min_samples` samples: the model's
        shortest input (`seqc.compiler.min_length.min_audio_samples`), the rule `seqc decode`
        applies to a clip too. Else `too_short`'s error at the first short utterance's manifest
        line, naming its wav and listing every other short one. Text inputs have nothing to
        check. Cheap: the lengths come from the headers read with the manifest."""
        if self.sample_rate is None:
            return
        short = [
            e
            for s in self.splits.values()
            for e in s.examples
            if e.audio is not None and e.audio.frames < min_samples
        ]
        if short:
            first = short[0]
            assert first.audio is not None
            raise too_short(
                first.audio.path,
                first.audio.frames,
                min_samples,
                self.sample_rate,
                first.location,
                others=tuple(
                    f"{e.location} ({e.source}, {e.audio.frames:,} samples)"
                    for e in short[1:]
                    if e.audio is not None
                ),
            )

    # ------------------------------------------------------------------------ building

    def _norm(self, text: str) -> str:
        return text.lower() if self.lowercase else text

    def _split(self, split: str) -> SplitData:
        if split not in self.splits:
            raise DataError(
                f"input `{self.name}` has no {split} split",
                code="missing-split",
                expected=f"one of {', '.join(self.splits)}",
            )
        return self.splits[split]

    def _default_audio_bound(self, examples: list[Example]) -> int:
        """Speech without buckets: the longest training utterance within `max_length`, rounded
        up to a whole second, in samples."""
        assert self.sample_rate is not None
        frames = [e.audio.frames for e in examples if e.audio is not None]
        longest = max((n for n in frames if n <= self.max_length), default=self.max_length)
        return max(1, math.ceil(longest / self.sample_rate)) * self.sample_rate

    def _tokenise(self, split: str, examples: list[Example], drops: DropReport) -> SplitData:
        if self.task == "asr":
            return self._tokenise_speech(split, examples, drops)
        tok, ttok = self.tokenizer, self.target_tokenizer
        src_ids = tok.encode_batch([self._norm(e.source) for e in examples])
        first: list[np.ndarray]
        second: list[np.ndarray]
        third: list[np.ndarray] | None = None
        if self.task == "seq2seq":
            tgt_ids = ttok.encode_batch([self._norm(e.target or "") for e in examples])
            first = [np.asarray([*s, tok.eos_id], np.int32) for s in src_ids]
            second = [np.asarray([ttok.bos_id, *t], np.int32) for t in tgt_ids]
            third = [np.asarray([*t, ttok.eos_id], np.int32) for t in tgt_ids]
            lengths = [max(len(a), len(b)) for a, b in zip(first, second, strict=True)]
            origin = list(range(len(examples)))
        elif self.packed:
            first, second, origin = self._pack(src_ids)
            lengths = [len(a) for a in first]
        else:
            first = [np.asarray([tok.bos_id, *s], np.int32) for s in src_ids]
            second = [np.asarray([*s, tok.eos_id], np.int32) for s in src_ids]
            lengths = [len(a) for a in first]
            origin = list(range(len(examples)))

        batcher = self._batcher(split, lengths, lambda i: examples[origin[i]].location, drops)
        return SplitData(split, examples, first, second, third, origin, batcher, drops)

    def _batcher(
        self, split: str, lengths: list[int], location: Callable[[int], str], drops: DropReport
    ) -> BucketBatcher:
        """The split's batch planner over these lengths: train's buckets, shuffled and cut at
        `max_length`; dev and test keep every example (one larger bucket if need be), in order."""
        buckets = self.buckets
        max_length: int | None = self.max_length
        if split != "train":
            buckets, max_length = _eval_buckets(buckets, max(lengths, default=0)), None
        batcher = BucketBatcher(
            lengths,
            buckets,
            shuffle_buffer=self.shuffle_buffer if split == "train" else 0,
            seed=self.seed,
            max_length=max_length,
            location=location,
        )
        drops.merge(batcher.drops)
        return batcher

    def _tokenise_speech(self, split: str, examples: list[Example], drops: DropReport) -> SplitData:
        tok = self.tokenizer
        ids = tok.encode_batch([self._norm(e.target or "") for e in examples])
        labels = [np.asarray(t, np.int32) for t in ids]
        tgt_in = [np.asarray([tok.bos_id, *t], np.int32) for t in ids]
        tgt_out = [np.asarray([*t, tok.eos_id], np.int32) for t in ids]
        own = label_bound(max((len(t) for t in ids), default=0))
        if split == "train":
            self.label_length = own
        label_length = max(own, self.label_length)
        lengths = [e.audio.frames if e.audio is not None else 0 for e in examples]
        batcher = self._batcher(split, lengths, lambda i: examples[i].location, drops)
        origin = list(range(len(examples)))
        return SplitData(
            split, examples, labels, tgt_in, tgt_out, origin, batcher, drops, label_length
        )

    def _pack(self, ids: list[list[int]]) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
        tok = self.tokenizer
        window = min(self.buckets[-1].bound, self.max_length)
        lens = np.fromiter((len(s) + 1 for s in ids), np.int64, len(ids))
        stream = np.empty(1 + int(lens.sum()), np.int32)
        stream[0] = tok.bos_id
        pos = 1
        for s in ids:
            stream[pos : pos + len(s)] = s
            stream[pos + len(s)] = tok.eos_id
            pos += len(s) + 1
        starts = np.concatenate([[0], 1 + np.cumsum(lens)[:-1]])  # where each line begins
        inputs, targets, origin = [], [], []
        for k in range(math.ceil((len(stream) - 1) / window)):
            chunk = stream[k * window : k * window + window + 1]
            inputs.append(chunk[:-1])
            targets.append(chunk[1:])
            origin.append(max(0, int(np.searchsorted(starts, k * window, side="right")) - 1))
        return inputs, targets, origin

    def _materialise(self, data: SplitData, bucket: Bucket, indices: tuple[int, ...]) -> Batch:
        rows, length = bucket.batch_size, bucket.bound
        pad_id = self.tokenizer.pad_id
        if self.task == "asr":
            return self._materialise_speech(data, bucket, indices)
        if self.task == "lm":
            inputs, _ = pad([data.first[i] for i in indices], rows, length, pad_id)
            targets, mask = pad([data.second[i] for i in indices], rows, length, pad_id)
            arrays = {"inputs": inputs, "targets": targets, "mask": mask}
        else:
            assert data.third is not None
            tpad = self.target_tokenizer.pad_id
            src, src_mask = pad([data.first[i] for i in indices], rows, length, pad_id)
            tgt_in, _ = pad([data.second[i] for i in indices], rows, length, tpad)
            tgt_out, tgt_mask = pad([data.third[i] for i in indices], rows, length, tpad)
            arrays = {
                "src": src,
                "src_mask": src_mask,
                "tgt_in": tgt_in,
                "tgt_out": tgt_out,
                "tgt_mask": tgt_mask,
            }
        return Batch(self.task, arrays, length, len(indices), indices)

    def _materialise_speech(
        self, data: SplitData, bucket: Bucket, indices: tuple[int, ...]
    ) -> Batch:
        rows, length = bucket.batch_size, bucket.bound
        audio = np.zeros((rows, length), np.float32)
        audio_mask = np.zeros((rows, length), bool)
        for r, i in enumerate(indices):
            example = data.examples[i]
            clip = example.audio
            assert clip is not None
            samples = read_wav(clip.path, clip.sample_rate, location=example.location)
            if len(samples) != clip.frames:
                raise DataError(
                    f"{example.source} changed while the pipeline was running",
                    code="bad-audio",
                    path=example.location,
                    expected=f"{clip.frames} samples, as when the manifest was read",
                    found=f"{len(samples)} samples",
                    hint="do not rewrite a corpus while a run reads it",
                )
            audio[r, : len(samples)] = to_float(samples)
            audio_mask[r, : len(samples)] = True
        assert data.third is not None
        pad_id, label_length = self.tokenizer.pad_id, data.label_length
        labels, label_mask = pad([data.first[i] for i in indices], rows, label_length, pad_id)
        tgt_in, _ = pad([data.second[i] for i in indices], rows, label_length, pad_id)
        tgt_out, tgt_mask = pad([data.third[i] for i in indices], rows, label_length, pad_id)
        arrays = {
            "audio": audio,
            "audio_mask": audio_mask,
            "tgt_in": tgt_in,
            "tgt_out": tgt_out,
            "tgt_mask": tgt_mask,
            "labels": labels,
            "label_mask": label_mask,
        }
        return Batch(self.task, arrays, length, len(indices), indices)


def _eval_buckets(buckets: tuple[Bucket, ...], longest: int) -> tuple[Bucket, ...]:
    """The train buckets, plus one bucket for dev/test examples longer than all of them:
    its bound a multiple of the largest, its batch size scaled down to keep tokens per batch."""
    top = buckets[-1]
    if longest <= top.bound:
        return buckets
    bound = math.ceil(longest / top.bound) * top.bound
    return (*buckets, Bucket(bound, max(1, top.batch_size * top.bound // bound)))


def _with_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with every `input` field present (defaults from the catalogue), so a
    hand-written dict in a test or script behaves like a resolved one."""
    spec = kind_spec("block", "input")
    out = {p.name: p.default for p in spec.params if not p.required}
    out.update(config)
    for name in ("train", "tokenizer"):
        if out.get(name) is None:
            raise DataError(f"an input block needs `{name}`", code="missing-field")
    return out
