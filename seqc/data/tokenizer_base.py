"""What every tokenizer shares: the four special ids, the protocol the pipeline and the
backends use, and the record a saved tokenizer keeps (`tokenizer.json`).

Why a module of its own: the tokenizer kinds live in two modules (`tokenizers` for the
counted vocabularies and bytes, `sentencepiece_model` for the trained subword model), and both
build on this.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

from seqc.data.errors import DataError, display_path

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<s>", "</s>", "<unk>")
NUM_SPECIAL = len(SPECIAL_TOKENS)
BYTE_VOCAB_SIZE = 256 + NUM_SPECIAL
"""Ids of the `bytes` tokenizer: 256 byte values after the four specials."""

TOKENIZER_FILE = "tokenizer.json"
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


class Specials(abc.ABC):
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

    def content_ids(self, ids: Sequence[int]) -> list[int]:
        skip = {self.pad_id, self.bos_id, self.eos_id}
        return [int(i) for i in ids if int(i) not in skip]


def write_record(directory: Path, data: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    (directory / TOKENIZER_FILE).write_text(text, encoding="utf-8")


def read_record(directory: Path, kind: str) -> dict[str, Any]:
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
