"""The `sentencepiece` tokenizer: a subword model trained on the train split, and its cache.

Training takes seconds to minutes, so models are cached under `cache_dir`, keyed by a hash of
the settings and of the training text, or of what names it (`content_key`: the pipeline passes
the train files' digests, so a run finds its model without reading the corpus). A split with
more than `SAMPLE_SENTENCES` sentences is sampled by SentencePiece itself (seeded). Each entry
records its key and its model file's sha256, checked whenever it is read: an entry that fails
(truncated, another model copied in, written by an older seqc) is rebuilt, never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import re
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

import sentencepiece as spm

from seqc.data.errors import DataError, display_path
from seqc.data.staging import staging_dir
from seqc.data.tokenizer_base import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    TOKENIZER_FILE,
    UNK_ID,
    Specials,
    Tokenizer,
    read_record,
    write_record,
)

SAMPLE_SENTENCES = 1_000_000
"""SentencePiece trains on at most this many sentences of the train split, sampled by
SentencePiece (`input_sentence_size`): a few hundred MB of memory however large the corpus."""
SAMPLE_SEED = 0
"""SentencePiece's random seed for that sample, so the same corpus gives the same model."""


class SentencePieceTokenizer(Specials):
    """A SentencePiece model, trained here with the specials at ids 0-3 or loaded from a file."""

    kind: ClassVar[str] = "sentencepiece"
    MODEL_FILE: ClassVar[str] = "spm.model"

    def __init__(self, model_proto: bytes, settings: dict[str, Any] | None = None) -> None:
        self.model_proto = model_proto
        self.settings = dict(settings or {})
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        # A model trained elsewhere may lack a pad piece (id -1); padding is masked anyway.
        self.pad_id = self.sp.pad_id() if self.sp.pad_id() >= 0 else PAD_ID
        self.bos_id = self.sp.bos_id()
        self.eos_id = self.sp.eos_id()
        self.unk_id = self.sp.unk_id()

    @property
    def vocab_size(self) -> int:
        return int(self.sp.get_piece_size())

    def encode(self, text: str) -> list[int]:
        return list(self.sp.encode(text))

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(ids) for ids in self.sp.encode(list(texts))]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.sp.decode(self.content_ids(ids)))

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / self.MODEL_FILE).write_bytes(self.model_proto)
        write_record(directory, {"kind": self.kind, "settings": self.settings})

    @classmethod
    def load(cls, directory: Path) -> Self:
        data = read_record(Path(directory), cls.kind)
        path = Path(directory) / cls.MODEL_FILE
        try:
            return cls(path.read_bytes(), data.get("settings"))
        except (OSError, RuntimeError) as e:  # missing, truncated, or not a model at all
            raise DataError(
                f"cannot load SentencePiece model: {str(e).strip().splitlines()[0]}",
                code="bad-tokenizer",
                path=display_path(path),
                hint="the file is damaged; delete its folder and run again to rebuild it",
            ) from None

    @classmethod
    def from_model_file(cls, path: Path) -> Self:
        """Load an existing `.model` file (the `model` param of `sentencepiece(...)`)."""
        try:
            proto = Path(path).read_bytes()
            return cls(proto, {"model": str(path)})
        except (OSError, RuntimeError) as e:
            raise DataError(
                f"cannot load SentencePiece model: {e}",
                code="bad-tokenizer",
                path=display_path(path),
            ) from None

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        *,
        vocab_size: int = 8000,
        model_type: str = "unigram",
        character_coverage: float = 1.0,
    ) -> Self:
        """Train on `texts` (one sentence each; any iterable, read once), or on a sample of
        `SAMPLE_SENTENCES` of them drawn by SentencePiece itself (seeded) when there are more.
        A vocabulary too large for the text is a DataError saying the largest size that would
        work, rather than a silently smaller model: the spec sizes the model's embedding from
        `vocab_size`."""
        counted = _Counted(texts)
        if not counted.peek():
            raise DataError("no training text for the tokenizer", code="empty-corpus")
        settings = {
            "vocab_size": vocab_size,
            "model_type": model_type,
            "character_coverage": character_coverage,
        }
        out = io.BytesIO()
        spm.set_random_generator_seed(SAMPLE_SEED)
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(counted),
                input_sentence_size=SAMPLE_SENTENCES,
                shuffle_input_sentence=True,
                model_writer=out,
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=character_coverage,
                pad_id=PAD_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                unk_id=UNK_ID,
                max_sentence_length=1 << 16,
                num_threads=max(1, min(16, os.cpu_count() or 1)),
                minloglevel=2,
            )
        except RuntimeError as e:
            raise _training_error(str(e), vocab_size) from None
        tok = cls(out.getvalue(), settings)
        tok.settings["training_texts"] = counted.count
        return tok

    @classmethod
    def cached(
        cls,
        texts: Iterable[str],
        cache_dir: Path,
        *,
        vocab_size: int = 8000,
        model_type: str = "unigram",
        character_coverage: float = 1.0,
        content_key: str | None = None,
    ) -> Self:
        """Load the model trained on exactly these texts and settings, or train and cache it.
        With `content_key` (what names the texts: the files' digests and how they are read),
        the texts are read only to train, never to look the model up."""
        settings = {
            "vocab_size": vocab_size,
            "model_type": model_type,
            "character_coverage": character_coverage,
        }
        if content_key is None:
            texts = list(texts)
            key = training_key(texts, settings)
        else:
            key = content_training_key(content_key, settings)
        folder = Path(cache_dir) / f"sentencepiece-{key[:16]}"
        if folder.exists():
            found = cls._verified(folder, key)
            if found is not None:
                return found
            discard_entry(folder)  # damaged, replaced or of an older seqc: never used, rebuilt
        tok = cls.train(texts, **settings)
        tok.settings["key"] = key
        tok.settings["sha256"] = _sha256(tok.model_proto)
        save_entry(tok, folder)
        return tok

    @classmethod
    def _verified(cls, folder: Path, key: str) -> Self | None:
        """The cache entry in `folder` if it is the model of `key` as it was written: its
        record names the key, and the model file's sha256 is the one recorded beside it.
        Anything else (a truncated file, another valid model copied in, an entry without a
        sum) is None: a cache is trusted for what it says it holds, not for being there."""
        try:
            settings = read_record(folder, cls.kind).get("settings") or {}
            proto = (folder / cls.MODEL_FILE).read_bytes()
        except (DataError, OSError, ValueError):
            return None
        if settings.get("key") != key or settings.get("sha256") != _sha256(proto):
            return None
        try:
            return cls(proto, settings)
        except RuntimeError:
            return None


def _training_error(message: str, vocab_size: int) -> DataError:
    m = re.search(r"value <= (\d+)", message)
    if m:
        return DataError(
            f"the training text is too small for {vocab_size} SentencePiece pieces",
            code="vocab-too-large",
            expected=f"vocab_size <= {m.group(1)}",
            found=f"vocab_size = {vocab_size}",
            hint="lower the tokenizer's vocab_size (e.g. --set TASK.input.tokenizer.vocab_size="
            f"{m.group(1)}) or train on more text",
        )
    m = re.search(r"required_chars\. (\d+) vs (\d+)", message)
    if m:
        return DataError(
            f"{vocab_size} SentencePiece pieces cannot cover every character of the training text",
            code="vocab-too-small",
            expected=f"vocab_size >= {m.group(2)} (characters plus the 4 special tokens)",
            found=f"vocab_size = {vocab_size}",
            hint="raise the tokenizer's vocab_size or lower its character_coverage (e.g. 0.9995)",
        )
    return DataError(f"SentencePiece training failed: {message}", code="tokenizer-failed")


def training_key(texts: Iterable[str], settings: dict[str, Any]) -> str:
    """sha256 of the settings and the training text: the name of a cached model."""
    h = hashlib.sha256()
    h.update(json.dumps({"format": 1, **settings}, sort_keys=True).encode())
    h.update(b"\0")
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def content_training_key(content_key: str, settings: dict[str, Any]) -> str:
    """sha256 of the settings, the sample's bounds and what names the training text."""
    record = {"format": 2, "sample": [SAMPLE_SENTENCES, SAMPLE_SEED], **settings}
    h = hashlib.sha256(json.dumps(record, sort_keys=True).encode())
    h.update(b"\0" + content_key.encode())
    return h.hexdigest()


class _Counted:
    """An iterable of texts read once, counted as it goes, whose first text can be looked at
    before (an empty corpus is an error before SentencePiece starts)."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.it = iter(texts)
        self.head: list[str] = []
        self.count = 0

    def peek(self) -> bool:
        if not self.head:
            self.head = [t for t in itertools.islice(self.it, 1)]
        return bool(self.head)

    def __iter__(self) -> Iterator[str]:
        for t in itertools.chain(self.head, self.it):
            self.count += 1
            yield t


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def discard_entry(folder: Path) -> None:
    """Remove a cache entry that failed its check: renamed aside first, so a run that reads
    the folder at this moment sees a whole entry or none."""
    aside = staging_dir(folder.parent, folder.name)
    with contextlib.suppress(OSError):  # another run removed or replaced it first
        folder.rename(aside / folder.name)
    shutil.rmtree(aside, ignore_errors=True)


def save_entry(tok: Tokenizer, folder: Path) -> None:
    """Write into a temporary sibling and rename, so a crash never leaves half a cache entry
    and two runs training at once both end with a complete one."""
    tmp = staging_dir(folder.parent, folder.name)
    try:
        tok.save(tmp)
        try:
            tmp.rename(folder)
        except OSError:  # another run got there first; its model is the same
            if not (folder / TOKENIZER_FILE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
