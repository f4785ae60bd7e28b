"""What the input pipeline checks of its readers, and the train texts a tokenizer is fitted on.

Every split of an input block reads what its train split reads (audio or text, at one sample
rate, with a target or without): a split that does not is an error naming both, before anything
is read. A tokenizer not found in the cache is fitted on the train split's texts, streamed
from its files (memory flat in the corpus size), side after side.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from seqc.data.batch import TaskKind
from seqc.data.calls import call_args
from seqc.data.errors import DataError
from seqc.data.readers import BaseDirs, has_target, is_audio, iter_examples
from seqc.resolve.values import CallValue


def check_reader(split: str, reader: CallValue, task: TaskKind, sample_rate: int | None) -> None:
    """Every split reads what the train split reads: audio or text, at one sample rate,
    with a target or without."""
    if is_audio(reader) != (task == "asr"):
        this = "reads audio" if is_audio(reader) else "reads text"
        train = "does" if task == "asr" else "does not"
        raise DataError(
            f"the {split} reader {this} but the train reader {train}",
            code="mixed-splits",
            found=str(reader),
            hint="give every split of an input block the same kind of reader",
        )
    if sample_rate is not None:
        rate = int(call_args(reader)["sample_rate"])
        if rate != sample_rate:
            raise DataError(
                f"the {split} reader's sample_rate is {rate} Hz, the train reader's "
                f"{sample_rate} Hz",
                code="mixed-splits",
                expected=f"{sample_rate} Hz, as the model is trained on",
                found=f"{rate} Hz",
                hint=f"resample the split with `sox -D in.wav -r {sample_rate} -c 1 -b 16 out.wav`",
            )
    if task != "asr" and has_target(reader) != (task == "seq2seq"):
        this = "has a" if has_target(reader) else "has no"
        train = "has one" if task == "seq2seq" else "does not"
        raise DataError(
            f"the {split} reader {this} target but the train reader {train}",
            code="mixed-splits",
            found=str(reader),
            hint="give every split of an input block the same columns or fields",
        )


class TrainTexts:
    """The train split's texts a tokenizer is fitted on, side after side, in file order:
    read from the files each time it is iterated (only when no tokenizer is cached)."""

    def __init__(
        self,
        reader: CallValue,
        files: list[Path],
        sides: tuple[str, ...],
        base_dir: BaseDirs | None,
        lowercase: bool,
    ) -> None:
        self.reader, self.files, self.sides = reader, files, sides
        self.base_dir, self.lowercase = base_dir, lowercase

    def __iter__(self) -> Iterator[str]:
        for side in self.sides:
            for e in iter_examples(self.reader, self.base_dir, None, self.files):
                text = e.source if side == "source" else e.target or ""
                yield text.lower() if self.lowercase else text
