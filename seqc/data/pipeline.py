"""From a resolved `input` block to batches of token ids.

`InputPipeline(config)` finds the train/dev/test splits' files, builds the tokenizer from the
train split (or finds it in the cache by the files' content), has each split encoded once into
arrays on disk (`seqc.data.shards`: found in the cache by every later run, process and resume),
plans batches per split with `BucketBatcher` from the lengths alone, and streams them with
Grain (`seqc.data.shards.loader`), slicing each batch from the memory-mapped arrays
(`seqc.data.split_data`). What comes out is `Batch`es of numpy int32 ids and bool masks (see
`seqc.data.batch` for the fields). Memory is flat in the corpus size: nothing per token is held.

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

import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqc.data.audio import too_short
from seqc.data.augment import augmenter
from seqc.data.batch import Batch, TaskKind
from seqc.data.bucketing import (
    DEFAULT_BATCH_SIZE,
    Bucket,
    BucketBatcher,
    make_audio_buckets,
    make_buckets,
    seconds_to_samples,
)
from seqc.data.calls import call_args, kind_spec
from seqc.data.errors import DataError
from seqc.data.input_checks import TrainTexts, check_reader
from seqc.data.proposal import count_tokens
from seqc.data.readers import (
    BaseDirs,
    Example,
    has_target,
    is_audio,
    iter_examples,
    reader_files,
    spec_bases,
)
from seqc.data.report import DropReport
from seqc.data.row_records import RowRecords
from seqc.data.shards.digest import file_digests
from seqc.data.shards.encode import Progress, Sides
from seqc.data.shards.store import encoded
from seqc.data.split_data import Framing, SplitData
from seqc.data.tokenizers import Tokenizer, build_tokenizer, fingerprint
from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.values import CallValue

if TYPE_CHECKING:
    from seqc.data.shards.loader import BatchStream

SPLITS: tuple[str, ...] = ("train", "dev", "test")
DEFAULT_CACHE_DIR = Path(".cache") / "tokenizers"
"""Where trained tokenizers are kept, relative to the cwd unless given."""
LABEL_MULTIPLE = 8
"""Speech: the padded transcript length L is a multiple of this (fewer distinct shapes)."""


def label_bound(longest: int) -> int:
    """Speech: L for transcripts of at most `longest` tokens: the smallest multiple of
    `LABEL_MULTIPLE` that holds the longest plus its bos (or eos)."""
    return LABEL_MULTIPLE * math.ceil((longest + 1) / LABEL_MULTIPLE)


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
        workers: int | None = None,
        progress: Progress | None = None,
    ) -> None:
        """`config` is a task's resolved `input` dict; `base_dir` what relative paths are
        relative to (one dir or several tried in order); `pack` None packs `text` LM corpora;
        `workers` the processes that encode a split not yet in the cache (default: the CPUs,
        at most 4); `progress` called as a split is encoded (examples, characters so far)."""
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
        self.min_samples = 1
        """Speech: the model's shortest input, once `require_samples` has checked the data."""
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

        self.workers = workers if workers is not None else min(4, os.cpu_count() or 1)
        self.notes: list[str] = []
        """What the pipeline did that a log should say (a damaged cache encoded again)."""
        readers: dict[str, CallValue] = {}
        for split in splits:
            reader = cfg.get(split)
            if reader is None:
                continue
            check_reader(split, reader, self.task, self.sample_rate)
            readers[split] = reader
        if "train" not in readers:
            raise DataError("an input block needs a train split", code="missing-train")
        files = {split: reader_files(r, base_dir) for split, r in readers.items()}

        # speech keeps its manifests' utterances (wav paths and checked headers, read as
        # today, a few milliseconds a thousand files); text is read only to encode it
        audio: dict[str, tuple[list[Example], DropReport]] = {}
        if self.task == "asr":
            for split, reader in readers.items():
                drops = DropReport()
                audio[split] = (list(iter_examples(reader, base_dir, drops, files[split])), drops)
            self.buckets = make_audio_buckets(
                cfg["buckets"],
                self.sample_rate,
                self._default_audio_bound(audio["train"][0]),
                default_batch_size,
            )

        content = self._content_key(readers["train"], files["train"])
        target_call = cfg.get("target_tokenizer")
        fitted_on = self._tokenizer_sides(target_call)
        self.tokenizer: Tokenizer = build_tokenizer(
            cfg["tokenizer"],
            TrainTexts(readers["train"], files["train"], fitted_on, base_dir, self.lowercase),
            self.cache_dir,
            base_dir,
            content_key=content + ":" + ",".join(fitted_on),
        )
        self.target_tokenizer: Tokenizer = self.tokenizer
        if self.task == "seq2seq" and target_call is not None:
            self.target_tokenizer = build_tokenizer(
                target_call,
                TrainTexts(readers["train"], files["train"], ("target",), base_dir, self.lowercase),
                self.cache_dir,
                base_dir,
                content_key=content + ":target",
            )
        if self.task == "lm":
            sides = Sides(self.tokenizer, None, self.lowercase)
        elif self.task == "seq2seq":
            sides = Sides(self.tokenizer, self.target_tokenizer, self.lowercase)
        else:
            sides = Sides(None, self.tokenizer, self.lowercase)
        framing = Framing(
            self.tokenizer.bos_id, self.tokenizer.pad_id, self.target_tokenizer.pad_id
        )
        window = min(self.buckets[-1].bound, self.max_length) if self.packed else 0

        self.label_length = 0
        """Speech: L of the train split's batches (dev and test may have a larger one)."""
        self.splits: dict[str, SplitData] = {}
        for split in sorted(readers, key=lambda name: name != "train"):  # train fixes L first
            store = encoded(
                split,
                readers[split],
                files[split],
                base_dir,
                sides,
                self.cache_dir,
                workers=self.workers,
                progress=progress,
                note=self.notes.append,
            )
            drops = DropReport.from_json(store.meta.get("drops") or {})
            data = SplitData(
                split,
                self.task,
                store,
                readers[split],
                base_dir,
                framing,
                window=window,
                audio=audio[split][0] if split in audio else None,
                drops=audio[split][1] if split in audio else drops,
            )
            if self.task == "asr":
                own = label_bound(int(store.lengths("target").max(initial=1)) - 1)
                if split == "train":
                    self.label_length = own
                data.label_length = max(own, self.label_length)
            data.batcher = self._batcher(split, data.lengths(), data.location, data.drops)
            if split == "train" and self.task == "asr":
                data.augment = augmenter(cfg.get("augment") or (), self.seed)
            self.splits[split] = data
        self.splits = {split: self.splits[split] for split in readers}

    def _tokenizer_sides(self, target_call: CallValue | None) -> tuple[str, ...]:
        """Which texts of the train split the (source) tokenizer is fitted on, in order."""
        if self.task == "asr":
            return ("target",)  # the transcripts: the source is a wav path
        if self.task == "seq2seq" and target_call is None:
            # A joint tokenizer reads the file's columns in file order, so both directions of
            # one parallel file (source = 1, target = 0 against the other way) train the same
            # model and share its ids (a multi-task model that shares an embedding needs it).
            train = self.config["train"]
            swapped = train.kind == "tsv" and int(train.args.get("source", 0)) > int(
                train.args.get("target") or 0
            )
            return ("target", "source") if swapped else ("source", "target")
        return ("source",)

    def _content_key(self, reader: CallValue, files: list[Path]) -> str:
        """What names the train split's texts without reading them: the files' digests,
        the reader call and `lowercase`."""
        digests = file_digests(files, self.cache_dir)
        args = repr(sorted(reader.args.items()))
        return f"{reader.kind}|{args}|{self.lowercase}|{','.join(digests)}"

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
        encoded split, once per call: one bincount over its memory map."""
        flat = self._split(split).target_tokens()
        chunks = (flat[i : i + (1 << 22)] for i in range(0, len(flat), 1 << 22))
        return count_tokens(chunks, self.target_vocab_size)

    @property
    def sizes(self) -> dict[str, int]:
        """Examples read per split (lines or pairs, before packing and drops)."""
        return {name: s.texts for name, s in self.splits.items()}

    @property
    def drops(self) -> dict[str, DropReport]:
        """What each split left out, by reason."""
        return {name: s.drops for name, s in self.splits.items()}

    def steps_per_epoch(self, split: str = "train") -> int:
        return self._split(split).batcher.steps_per_epoch

    def batches(
        self,
        split: str = "train",
        *,
        start_step: int = 0,
        local_rows: Callable[[int], tuple[int, int] | None] | None = None,
    ) -> BatchStream:
        """Train: shuffled batches forever, from global step `start_step`. Dev/test: one
        pass in file order. Streamed by Grain (`seqc.data.shards.loader`): made ahead of the
        step that takes them, with a state a checkpoint can keep (`get_state`).
        `local_rows(rows)`: the rows of a training batch this process's devices take (a
        model's `local_rows`); only those rows' ids are read (`SplitData.materialise`)."""
        from seqc.data.shards.loader import BatchStream

        data = self._split(split)
        batcher = data.batcher
        assert batcher is not None
        if split == "train":
            batcher.plan_for_step(start_step)  # no batch at all: the error now, not in a thread

            def make(step: int) -> Batch:
                plan = batcher.plan_for_step(step)
                local = local_rows(plan.bucket.batch_size) if local_rows else None
                return data.materialise(plan.bucket, plan.indices, local, step=step)

            return BatchStream(make, start_step)
        plan = batcher.plan(0, shuffle=False)

        def make_eval(j: int) -> Batch:
            batch = batcher.batch(plan, j)
            return data.materialise(batch.bucket, batch.indices)

        return BatchStream(make_eval, 0, len(plan))

    def row_records(self, split: str = "train") -> RowRecords:
        """The split's sequences as records, for workers that make their own batches from
        disk (`seqc.data.row_records`)."""
        return self._split(split).row_records()

    def epoch(
        self, split: str = "train", epoch: int = 0, shuffle: bool | None = None
    ) -> Iterator[Batch]:
        """The batches of one epoch (shuffled by default for train only)."""
        data = self._split(split)
        for plan in data.batcher.epoch(epoch, split == "train" if shuffle is None else shuffle):
            yield data.materialise(plan.bucket, plan.indices)

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
        out["splits"] = {
            name: {"examples": split.texts, "sha256": split.store.meta["texts_sha256"]}
            for name, split in self.splits.items()
        }
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
                    f"  {name}: {s.texts} utterances ({s.audio_seconds / 3600:.2f} h), "
                    f"{s.size} kept, {s.batcher.steps_per_epoch} batches/epoch, "
                    f"transcripts padded to {s.label_length}; {s.drops}"
                )
                continue
            lines.append(
                f"  {name}: {s.texts} examples, {s.size} sequences, "
                f"{s.batcher.steps_per_epoch} batches/epoch; {s.drops}"
            )
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def require_samples(self, min_samples: int) -> None:
        """Every utterance of every split holds at least `min_samples` samples: the model's
        shortest input (`seqc.compiler.min_length.min_audio_samples`), the rule `seqc decode`
        applies to a clip too. Else `too_short`'s error at the first short utterance's manifest
        line, naming its wav and listing every other short one. Text inputs have nothing to
        check. Cheap: the lengths come from the headers read with the manifest."""
        if self.sample_rate is None:
            return
        self.min_samples = min_samples
        short = [
            e
            for s in self.splits.values()
            for e in s.audio or ()
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

    def _batcher(
        self, split: str, lengths: np.ndarray, location: Callable[[int], str], drops: DropReport
    ) -> BucketBatcher:
        """The split's batch planner over these lengths: train's buckets, shuffled and cut at
        `max_length`; dev and test keep every example (one larger bucket if need be), in order."""
        buckets = self.buckets
        max_length: int | None = self.max_length
        if split != "train":
            buckets, max_length = _eval_buckets(buckets, int(lengths.max(initial=0))), None
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
