"""Turning text into token ids and back.

Every tokenizer shares the same four special ids, so padding, masks and the BOS/EOS framing of
the pipeline do not depend on which tokenizer a spec picks:

    pad = 0   (padding; masked out of every loss)
    bos = 1   (start of sequence; the first decoder input)
    eos = 2   (end of sequence; the last target)
    unk = 3   (anything outside the vocabulary)

Kinds, matching the catalogue's `tokenizer` namespace:

- `sentencepiece`: a subword model trained on the train split with the spec's settings (on a
  seeded sample of `SAMPLE_SENTENCES` when the split has more). Training takes seconds to
  minutes, so models are cached under `cache_dir`, keyed by a hash of the settings and of the
  training text, or of what names it (`content_key`: the pipeline passes the train files'
  digests, so a run finds its model without reading the corpus): a second run with the same
  data and spec loads the model instead of retraining, and any change to either trains a new
  one. Each entry records its key
  and its model file's sha256, checked whenever it is read: an entry that fails (truncated,
  another model copied in, written by an older seqc) is rebuilt, never used.
- `chars`, `words`: vocabularies counted from the training text; cached by `content_key` when
  one is given (counting a gigabyte takes minutes), else counted each time.
- `bytes`: UTF-8 bytes, ids 4..259; needs no training and never produces `unk`.

Each tokenizer can `save` itself to a directory (a `tokenizer.json` plus any model file) and
be loaded back with `load_tokenizer`, so a checkpoint can carry the exact vocabulary it used.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import io
import itertools
import json
import os
import re
import shutil
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

import sentencepiece as spm

from seqc.data.calls import call_args
from seqc.data.errors import DataError, display_path
from seqc.data.readers import BaseDirs, resolve_paths
from seqc.data.staging import staging_dir
from seqc.resolve.values import CallValue

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<s>", "</s>", "<unk>")
NUM_SPECIAL = len(SPECIAL_TOKENS)
BYTE_VOCAB_SIZE = 256 + NUM_SPECIAL
"""Ids of the `bytes` tokenizer: 256 byte values after the four specials."""

TOKENIZER_FILE = "tokenizer.json"
SAMPLE_SENTENCES = 1_000_000
"""SentencePiece trains on at most this many sentences of the train split, sampled by
SentencePiece (`input_sentence_size`): a few hundred MB of memory however large the corpus."""
SAMPLE_SEED = 0
"""SentencePiece's random seed for that sample, so the same corpus gives the same model."""
UNK_TEXT = "\u2047"
"""What `decode` writes for the unknown token (the same mark SentencePiece uses)."""


@runtime_checkable
class Tokenizer(Protocol):
    """What the pipeline and the backends need from any tokenizer."""

    kind: str
    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included: every id is in range(vocab_size)."""
        ...

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of the ids; pad, bos and eos are left out."""
        ...

    def save(self, directory: Path) -> None: ...

    @classmethod
    def load(cls, directory: Path) -> Self: ...


class _Specials(abc.ABC):
    """The shared special ids and a default batch encode."""

    kind: ClassVar[str] = ""
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    unk_id: int = UNK_ID

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without bos or eos."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def _content(self, ids: Sequence[int]) -> list[int]:
        skip = {self.pad_id, self.bos_id, self.eos_id}
        return [int(i) for i in ids if int(i) not in skip]


def _write_json(directory: Path, data: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    (directory / TOKENIZER_FILE).write_text(text, encoding="utf-8")


def _read_json(directory: Path, kind: str) -> dict[str, Any]:
    path = Path(directory) / TOKENIZER_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(
            "no saved tokenizer here", code="missing-tokenizer", path=display_path(path)
        ) from None
    if data.get("kind") != kind:
        raise DataError(
            f"saved tokenizer is `{data.get('kind')}`, not `{kind}`",
            code="bad-tokenizer",
            path=display_path(path),
        )
    return data


# ------------------------------------------------------------------------------ vocabularies


class _VocabTokenizer(_Specials):
    """A fixed list of tokens after the specials; subclasses say how text splits into tokens."""

    def __init__(self, tokens: Sequence[str], *, lowercase: bool = False) -> None:
        self.tokens: tuple[str, ...] = (*SPECIAL_TOKENS, *tokens)
        self.lowercase = lowercase
        # Specials are not looked up: a literal "<s>" in the corpus is text, not the real bos.
        self._ids = {t: i for i, t in enumerate(self.tokens) if i >= NUM_SPECIAL}
        if len(self._ids) != len(tokens):
            raise ValueError("tokens repeat or include a special token")

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @abc.abstractmethod
    def split(self, text: str) -> list[str]:
        """The tokens of `text`, before they are looked up in the vocabulary."""

    def encode(self, text: str) -> list[int]:
        if self.lowercase:
            text = text.lower()
        get, unk = self._ids.get, self.unk_id
        return [get(t, unk) for t in self.split(text)]

    def token(self, i: int) -> str:
        # A model's vocabulary may be larger than the tokenizer's (`vocab = 24` over 20 ids):
        # an id past the tokens decodes as unknown rather than failing.
        return UNK_TEXT if i == self.unk_id or i >= len(self.tokens) else self.tokens[i]

    def save(self, directory: Path) -> None:
        _write_json(
            Path(directory),
            {"kind": self.kind, "lowercase": self.lowercase, "tokens": self.tokens[NUM_SPECIAL:]},
        )

    @classmethod
    def load(cls, directory: Path) -> Self:
        data = _read_json(Path(directory), cls.kind)
        return cls(data["tokens"], lowercase=data["lowercase"])


def _counted(counts: Counter[str], min_count: int, limit: int | None) -> list[str]:
    """Tokens seen at least `min_count` times, most frequent first (ties by text, so the
    vocabulary is the same for the same corpus whatever order it was read in)."""
    kept = [t for t, n in counts.items() if n >= min_count and t not in SPECIAL_TOKENS]
    kept.sort(key=lambda t: (-counts[t], t))
    return kept if limit is None else kept[:limit]


class CharTokenizer(_VocabTokenizer):
    """One token per Unicode character seen in the training text."""

    kind: ClassVar[str] = "chars"

    def split(self, text: str) -> list[str]:
        return list(text)

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.token(i) for i in self._content(ids))

    @classmethod
    def fit(cls, texts: Iterable[str], *, min_count: int = 1, lowercase: bool = False) -> Self:
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(t.lower() if lowercase else t)
        return cls(_counted(counts, min_count, None), lowercase=lowercase)


class WordTokenizer(_VocabTokenizer):
    """One token per whitespace-separated word; `decode` joins words with single spaces."""

    kind: ClassVar[str] = "words"

    def split(self, text: str) -> list[str]:
        return text.split()

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.token(i) for i in self._content(ids))

    @classmethod
    def fit(
        cls,
        texts: Iterable[str],
        *,
        vocab_size: int = 20000,
        min_count: int = 1,
        lowercase: bool = False,
    ) -> Self:
        if vocab_size <= NUM_SPECIAL:
            raise DataError(
                f"words(vocab_size = {vocab_size}) leaves no room for words",
                code="bad-vocab-size",
                expected=f"vocab_size > {NUM_SPECIAL} (the special tokens)",
            )
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update((t.lower() if lowercase else t).split())
        return cls(_counted(counts, min_count, vocab_size - NUM_SPECIAL), lowercase=lowercase)


class ByteTokenizer(_Specials):
    """UTF-8 bytes as ids 4..259: no training, no unknown token, any text round-trips."""

    kind: ClassVar[str] = "bytes"

    @property
    def vocab_size(self) -> int:
        return BYTE_VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        return [b + NUM_SPECIAL for b in text.encode("utf-8")]

    def decode(self, ids: Sequence[int]) -> str:
        data = bytes(i - NUM_SPECIAL for i in self._content(ids) if i >= NUM_SPECIAL)
        return data.decode("utf-8", errors="replace")

    def save(self, directory: Path) -> None:
        _write_json(Path(directory), {"kind": self.kind})

    @classmethod
    def load(cls, directory: Path) -> Self:
        _read_json(Path(directory), cls.kind)
        return cls()


# ------------------------------------------------------------------------------ sentencepiece


class SentencePieceTokenizer(_Specials):
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
        return str(self.sp.decode(self._content(ids)))

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / self.MODEL_FILE).write_bytes(self.model_proto)
        _write_json(directory, {"kind": self.kind, "settings": self.settings})

    @classmethod
    def load(cls, directory: Path) -> Self:
        data = _read_json(Path(directory), cls.kind)
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
            _discard(folder)  # damaged, replaced or of an older seqc: never used, rebuilt
        tok = cls.train(texts, **settings)
        tok.settings["key"] = key
        tok.settings["sha256"] = _sha256(tok.model_proto)
        _save_atomically(tok, folder)
        return tok

    @classmethod
    def _verified(cls, folder: Path, key: str) -> Self | None:
        """The cache entry in `folder` if it is the model of `key` as it was written: its
        record names the key, and the model file's sha256 is the one recorded beside it.
        Anything else (a truncated file, another valid model copied in, an entry without a
        sum) is None: a cache is trusted for what it says it holds, not for being there."""
        try:
            settings = _read_json(folder, cls.kind).get("settings") or {}
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


def _discard(folder: Path) -> None:
    """Remove a cache entry that failed its check: renamed aside first, so a run that reads
    the folder at this moment sees a whole entry or none."""
    aside = staging_dir(folder.parent, folder.name)
    with contextlib.suppress(OSError):  # another run removed or replaced it first
        folder.rename(aside / folder.name)
    shutil.rmtree(aside, ignore_errors=True)


def _save_atomically(tok: Tokenizer, folder: Path) -> None:
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


# ------------------------------------------------------------------------------ factory

_KINDS: dict[str, type[Any]] = {
    "sentencepiece": SentencePieceTokenizer,
    "chars": CharTokenizer,
    "words": WordTokenizer,
    "bytes": ByteTokenizer,
}


def build_tokenizer(
    call: CallValue,
    texts: Iterable[str],
    cache_dir: Path,
    base_dir: BaseDirs | None = None,
    content_key: str | None = None,
) -> Tokenizer:
    """The tokenizer a spec's `tokenizer = kind(...)` call describes, fitted on `texts` (the
    train split) or loaded from the cache or from the call's `model` file. With
    `content_key` (what names the texts without reading them), `texts` is read only when
    nothing is cached under it, and counted vocabularies are cached too: counting a
    gigabyte of text takes minutes."""
    args = call_args(call)
    if call.kind == "bytes":
        return ByteTokenizer()
    if call.kind == "sentencepiece":
        if args.get("model"):
            (path,) = resolve_paths(args["model"], base_dir)[:1]
            return SentencePieceTokenizer.from_model_file(path)
        return SentencePieceTokenizer.cached(
            texts,
            Path(cache_dir),
            vocab_size=args["vocab_size"],
            model_type=args["model_type"],
            character_coverage=args["character_coverage"],
            content_key=content_key,
        )
    if content_key is not None and call.kind in ("chars", "words"):
        return _cached_vocabulary(call, texts, Path(cache_dir), content_key)
    if call.kind == "chars":
        return CharTokenizer.fit(texts, min_count=args["min_count"], lowercase=args["lowercase"])
    if call.kind == "words":
        return WordTokenizer.fit(
            texts,
            vocab_size=args["vocab_size"],
            min_count=args["min_count"],
            lowercase=args["lowercase"],
        )
    raise DataError(
        f"unknown tokenizer kind `{call.kind}`",
        code="unknown-kind",
        expected=f"one of {', '.join(_KINDS)}",
    )


def _cached_vocabulary(
    call: CallValue, texts: Iterable[str], cache_dir: Path, content_key: str
) -> Tokenizer:
    """A `chars` or `words` vocabulary counted once per content key, then loaded."""
    args = {k: v for k, v in sorted(call_args(call).items())}
    h = hashlib.sha256(json.dumps([call.kind, repr(args)]).encode())
    h.update(b"\0" + content_key.encode())
    folder = cache_dir / f"{call.kind}-{h.hexdigest()[:16]}"
    if folder.exists():
        with contextlib.suppress(DataError, OSError, ValueError, KeyError):
            return load_tokenizer(folder)
        _discard(folder)  # damaged: rebuilt, never used
    tok = build_tokenizer(call, texts, cache_dir)
    tmp = staging_dir(folder.parent, folder.name)
    try:
        tok.save(tmp)
        with contextlib.suppress(OSError):  # another run got there first: the same vocabulary
            tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tok


def load_tokenizer(directory: Path) -> Tokenizer:
    """A tokenizer saved with `save(directory)`, whatever its kind."""
    path = Path(directory) / TOKENIZER_FILE
    try:
        kind = json.loads(path.read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError):
        raise DataError(
            "no readable saved tokenizer here", code="missing-tokenizer", path=display_path(path)
        ) from None
    if kind not in _KINDS:
        raise DataError(f"unknown saved tokenizer kind `{kind}`", code="bad-tokenizer")
    tok: Tokenizer = _KINDS[kind].load(Path(directory))
    return tok


def fingerprint(tok: Tokenizer) -> dict[str, Any]:
    """What identifies a tokenizer's mapping from text to ids, for a run to record and compare:
    its kind, vocabulary size and a sha256 of what decides the ids (the SentencePiece model,
    the vocabulary list), as `same_tokenizer` compares them."""
    h = hashlib.sha256(type(tok).__name__.encode())
    if isinstance(tok, SentencePieceTokenizer):
        h.update(tok.model_proto)
    elif isinstance(tok, _VocabTokenizer):
        h.update(json.dumps([tok.lowercase, list(tok.tokens)], ensure_ascii=False).encode())
    return {"kind": tok.kind, "vocab_size": tok.vocab_size, "sha256": h.hexdigest()}


def same_tokenizer(a: Tokenizer, b: Tokenizer) -> bool:
    """Whether two tokenizers map text to the same ids (one trained model, one vocabulary)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, SentencePieceTokenizer) and isinstance(b, SentencePieceTokenizer):
        return a.model_proto == b.model_proto
    if isinstance(a, _VocabTokenizer) and isinstance(b, _VocabTokenizer):
        return a.tokens == b.tokens and a.lowercase == b.lowercase
    return a.vocab_size == b.vocab_size
