"""Turning text into token ids and back.

Every tokenizer shares the same four special ids (`seqc.data.tokenizer_base`), so padding,
masks and the BOS/EOS framing of the pipeline do not depend on which tokenizer a spec picks:

    pad = 0   (padding; masked out of every loss)
    bos = 1   (start of sequence; the first decoder input)
    eos = 2   (end of sequence; the last target)
    unk = 3   (anything outside the vocabulary)

Kinds, matching the catalogue's `tokenizer` namespace:

- `sentencepiece`: a subword model trained on the train split with the spec's settings
  (`seqc.data.sentencepiece_model`: its sampling of large splits and its cache).
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
import json
import shutil
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

from seqc.data.calls import call_args
from seqc.data.errors import DataError, display_path
from seqc.data.readers import BaseDirs, resolve_paths
from seqc.data.sentencepiece_model import SentencePieceTokenizer, discard_entry
from seqc.data.staging import staging_dir
from seqc.data.tokenizer_base import (
    BOS_ID as BOS_ID,
)
from seqc.data.tokenizer_base import (
    BYTE_VOCAB_SIZE,
    NUM_SPECIAL,
    SPECIAL_TOKENS,
    TOKENIZER_FILE,
    UNK_TEXT,
    Specials,
    Tokenizer,
    read_record,
    write_record,
)
from seqc.data.tokenizer_base import (
    EOS_ID as EOS_ID,
)
from seqc.data.tokenizer_base import (
    PAD_ID as PAD_ID,
)
from seqc.data.tokenizer_base import (
    UNK_ID as UNK_ID,
)
from seqc.resolve.values import CallValue

# ------------------------------------------------------------------------------ vocabularies


class _VocabTokenizer(Specials):
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
        write_record(
            Path(directory),
            {"kind": self.kind, "lowercase": self.lowercase, "tokens": self.tokens[NUM_SPECIAL:]},
        )

    @classmethod
    def load(cls, directory: Path) -> Self:
        data = read_record(Path(directory), cls.kind)
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
        return "".join(self.token(i) for i in self.content_ids(ids))

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
        return " ".join(self.token(i) for i in self.content_ids(ids))

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


class ByteTokenizer(Specials):
    """UTF-8 bytes as ids 4..259: no training, no unknown token, any text round-trips."""

    kind: ClassVar[str] = "bytes"

    @property
    def vocab_size(self) -> int:
        return BYTE_VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        return [b + NUM_SPECIAL for b in text.encode("utf-8")]

    def decode(self, ids: Sequence[int]) -> str:
        data = bytes(i - NUM_SPECIAL for i in self.content_ids(ids) if i >= NUM_SPECIAL)
        return data.decode("utf-8", errors="replace")

    def save(self, directory: Path) -> None:
        write_record(Path(directory), {"kind": self.kind})

    @classmethod
    def load(cls, directory: Path) -> Self:
        read_record(Path(directory), cls.kind)
        return cls()


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
        discard_entry(folder)  # damaged: rebuilt, never used
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
