"""Streaming a split's batches with Grain: random access by step, prefetched, checkpointable.

A split's batches form a Grain `MapDataset` over step numbers: element `s` is the batch of
step `s` (the epoch's plan, `BucketBatcher.plan_for_step`, made into arrays from the memory
maps). Grain's iterator makes them ahead of the training step in its threads
(`ReadOptions`), in order, and its state (`get_state`, `{"next_index": s}`) is what a checkpoint
records: `--resume` sets it, and the next batch is the very one an uninterrupted run would
have drawn, without replaying the steps before it.

Threads, not processes: materialising a batch is a few slices and a copy (numpy releases the
GIL for the copies; reading a wav, for speech, is I/O), so worker processes would add pickling
of every batch for nothing on this machine. `MultiprocessingOptions` is the knob if that ever
changes.

Grain imports JAX's profiler when JAX is installed, so this module is imported only when
batches are asked for (a TensorFlow run in an install with both frameworks pays that import).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grain

from seqc.data.batch import Batch

STEPS = 1 << 50
"""Length of the training stream: batches epoch after epoch, as good as forever."""
THREADS = 2
PREFETCH = 8
"""Batches made ahead of the step: a few MB, and enough to hide a slow read."""


class BatchStream(Iterator[Batch]):
    """The batches of steps `start`, `start + 1`, ... (to `stop`): an iterator with Grain's
    checkpointable state."""

    def __init__(self, make: Callable[[int], Batch], start: int, stop: int = STEPS) -> None:
        dataset = grain.MapDataset.range(0, stop).map(make)
        options = grain.ReadOptions(num_threads=THREADS, prefetch_buffer_size=PREFETCH)
        self._it = iter(dataset.to_iter_dataset(options))
        if start:
            self._it.set_state({"next_index": int(start)})

    def __next__(self) -> Batch:
        return next(self._it)

    def get_state(self) -> dict[str, Any]:
        """Grain's state: the next step's index. JSON-serialisable, saved with checkpoints."""
        return dict(self._it.get_state())
