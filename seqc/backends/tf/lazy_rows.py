"""The gathered rows of row-sparse tables as TensorFlow computes them (`adam(lazy_rows = true)`).

The mirror of `seqc.backends.jax.lazy_rows`, read that first: each gather of a row-sparse
table (`seqc.compiler.lazy_rows`) returns `gather(W, ids) + δ`, δ a zero tensor the tape
watches, so dL/dδ holds the gathered rows' gradients and no dense V x d gradient is built; the
ids of a table's gathers are made unique and each unique row's gradient is the sum of its
occurrences'. `seqc.backends.tf.optim.Optimizer.apply` then updates those rows in place
(`scatter_nd_update`). TF's own `tf.gather` gradient (IndexedSlices) would give the same rows,
but only for a gather straight off the variable; this reads the same whatever the op does with
the table's dtype, and keeps one definition of "the rows a step touched" on both backends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from seqc.compiler.lazy_rows import LazyRows


@dataclass
class Gathers:
    """What the gathers of row-sparse tables did during one step, in order."""

    tape: tf.GradientTape
    record: list[tuple[str, tf.Tensor, tf.Tensor]] = field(default_factory=list)
    """(table, ids, δ) of each gather."""


@dataclass
class LazyTable:
    """A row-sparse variable as the graph's gathers see it (`seqc.backends.tf.ops._gather`)."""

    name: str
    value: tf.Variable
    axis: int
    gathers: Gathers

    def gather(self, ids: tf.Tensor, axis: int) -> tf.Tensor:
        assert axis == self.axis, "lazy_rows checked every gather's axis"
        rows = tf.gather(tf.stop_gradient(self.value), ids, axis=axis)
        delta = tf.zeros_like(rows)
        self.gathers.tape.watch(delta)
        self.gathers.record.append((self.name, ids, delta))
        return rows + delta


Rows = dict[str, tuple[tf.Tensor, tf.Tensor]]
"""Table name -> (unique row ids [n], their gradients [n, *row])."""


def front(x: tf.Tensor, axis: int, ids_rank: int) -> tf.Tensor:
    """A gather's rows with the ids' axes first, flattened: [n, *the table's other axes]."""
    rank = len(x.shape)
    ids_axes = list(range(axis, axis + ids_rank))
    rest = [a for a in range(rank) if a not in ids_axes]
    moved = tf.transpose(x, ids_axes + rest)
    return tf.reshape(moved, tf.concat([[-1], tf.shape(moved)[ids_rank:]], 0))


def tables(params: Mapping[str, tf.Variable], lazy: Mapping[str, LazyRows], tape: Any) -> tuple:
    """The params the graphs read, row-sparse ones wrapped, and the record their gathers fill."""
    gathers = Gathers(tape)
    wrapped = {
        name: LazyTable(name, v, lazy[name].axis, gathers) if name in lazy else v
        for name, v in params.items()
    }
    return wrapped, gathers


def rows(gathers: Gathers, grads: list[tf.Tensor | None], lazy: Mapping[str, LazyRows]) -> Rows:
    """Each table's unique gathered rows and their summed gradients, from the gradients of
    the record's δs (in the record's order)."""
    found: Rows = {}
    for name, spec in lazy.items():
        picked = [
            (ids, g if g is not None else tf.zeros_like(delta))
            for (n, ids, delta), g in zip(gathers.record, grads, strict=True)
            if n == name
        ]
        if not picked:
            continue
        every = tf.concat([tf.reshape(tf.cast(ids, tf.int32), [-1]) for ids, _ in picked], 0)
        values = tf.concat([front(g, spec.axis, len(ids.shape)) for ids, g in picked], 0)
        unique, index = tf.unique(every)
        summed = tf.math.unsorted_segment_sum(values, index, tf.size(unique))
        found[name] = (unique, summed)
    return found


def take(x: tf.Tensor | tf.Variable, ids: tf.Tensor, axis: int) -> tf.Tensor:
    """The rows `ids` (along `axis`) of a param or moment, moved first: [n, *row]."""
    rows = tf.gather(x, ids, axis=axis)
    rank = len(rows.shape)
    return tf.transpose(rows, [axis, *[a for a in range(rank) if a != axis]])


def put(var: tf.Variable, ids: tf.Tensor, axis: int, values: tf.Tensor) -> None:
    """Write rows [n, *row] (as `take` gave them) back into `var` along `axis`, in place."""
    if axis == 0:
        var.scatter_nd_update(ids[:, None], values)
        return
    rank = len(values.shape)
    back = [*range(1, axis + 1), 0, *range(axis + 1, rank)]
    values = tf.transpose(values, back)  # [*before, n, *after]
    grids = tf.meshgrid(*[tf.range(int(d)) for d in var.shape[:axis]], ids, indexing="ij")
    var.scatter_nd_update(tf.stack(grids, axis=-1), values)
