"""N-best lists: a recogniser's best hypotheses per utterance with their scores, as `seqc decode
--nbest N` writes them and `seqc rescore` reads them.

The file is JSON Lines, one utterance per line, best hypothesis first:

    {"id": "dev/000001", "reference": "and god said", "hypotheses":
     [{"text": "and god said", "score": -3.2}, {"text": "and god sad", "score": -4.9}]}

`score` is the recogniser's own log-probability of the hypothesis (CTC: the prefix beam's, the
paths that read it summed; an attention decoder: its beam's); `reference` is the transcript when
the audio came from a manifest, else null. Why a file and not a pipe: the n-best lists of a
test set cost a recogniser's full decode, and rescoring tries many LMs and weights on them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqc.spec.errors import FileError


@dataclass(frozen=True)
class Hypothesis:
    text: str
    score: float

    @property
    def words(self) -> int:
        return len(self.text.split())


@dataclass(frozen=True)
class NBest:
    """One utterance's hypotheses, best first by the recogniser's score."""

    id: str
    hypotheses: tuple[Hypothesis, ...]
    reference: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "reference": self.reference,
            "hypotheses": [{"text": h.text, "score": h.score} for h in self.hypotheses],
        }


def write_nbest(lists: Iterable[NBest]) -> str:
    """The JSON Lines text of `lists`."""
    return "".join(json.dumps(n.to_json(), ensure_ascii=False) + "\n" for n in lists)


def read_nbest(path: Path) -> list[NBest]:
    """The n-best lists of a file `seqc decode --nbest` wrote; a damaged line is a FileError
    naming the file and the line."""
    if not path.is_file():
        raise FileError(
            f"no n-best file at {path}",
            path=str(path),
            code="file-not-found",
            hint="write one with: seqc decode ... --nbest 8 --output FILE",
        )
    out: list[NBest] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(_parse(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise FileError(
                f"line {number} is not an n-best line ({e})",
                path=f"{path}:{number}",
                code="bad-nbest",
                expected='{"id": ..., "reference": ..., "hypotheses": [{"text": ..., '
                '"score": ...}, ...]}',
                hint="n-best files are written by seqc decode --nbest N",
            ) from None
    return out


def _parse(record: dict[str, Any]) -> NBest:
    hyps = []
    for h in record["hypotheses"]:
        score = float(h["score"])
        if math.isnan(score):
            raise ValueError("a score is NaN")
        hyps.append(Hypothesis(str(h["text"]), score))
    if not hyps:
        raise ValueError("no hypotheses")
    ref = record.get("reference")
    return NBest(str(record["id"]), tuple(hyps), None if ref is None else str(ref))
