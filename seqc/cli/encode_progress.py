"""What `seqc data encode` shows while a task's splits are encoded, and its throughput after.

The pipeline calls `update(0, 0)` when it starts encoding a split and `update(examples,
characters)` as each chunk of it is written (a split found in the cache calls nothing).
"""

from __future__ import annotations

import sys
import time

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class EncodeProgress:
    """A live line per task (on stderr), and the totals it saw."""

    def __init__(self, task: str) -> None:
        self.task = task
        self.done_examples = self.done_chars = 0
        self.examples = self.chars = 0
        self.start = 0.0
        self.seconds = 0.0
        """Seconds spent encoding (from each split's start to its end; not the tokenizer's
        training, which comes before)."""
        self.bar = Progress(
            TextColumn("encoding {task.description}"),
            BarColumn(bar_width=None),
            TextColumn(
                "{task.fields[examples]:,} examples, {task.fields[mb]:.1f} MB, "
                "{task.fields[rate]:.1f} MB/s"
            ),
            TimeElapsedColumn(),
            transient=True,
            console=None,
            disable=not sys.stderr.isatty(),
        )
        self.id = self.bar.add_task(task, total=None, examples=0, mb=0.0, rate=0.0)

    def __enter__(self) -> EncodeProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()
        self._split_ended()

    def _split_ended(self) -> None:
        self.done_examples += self.examples
        self.done_chars += self.chars
        self.examples = self.chars = 0
        if self.start:
            self.seconds += time.perf_counter() - self.start
        self.start = 0.0

    def update(self, examples: int, chars: int) -> None:
        if examples == 0:  # a split's encoding begins
            self._split_ended()
            self.start = time.perf_counter()
            return
        self.examples, self.chars = examples, chars
        mb = (self.done_chars + chars) / 1e6
        rate = mb / max(1e-9, self.seconds + time.perf_counter() - self.start)
        self.bar.update(self.id, examples=self.done_examples + examples, mb=mb, rate=rate)

    def describe(self) -> str:
        """One line: what was encoded, how fast; or that the cache held everything."""
        if not self.done_examples:
            return f"{self.task}: every split was in the cache; nothing to encode"
        mb = self.done_chars / 1e6
        return (
            f"{self.task}: encoded {self.done_examples:,} examples ({mb:.1f} MB of text) in "
            f"{self.seconds:.1f} s: {mb / max(self.seconds, 1e-9):.2f} MB/s"
        )
