"""The shortest input a graph runs on: read from its symbolic shapes.

A valid (unpadded) convolution shortens the time axis: a log-mel front end turns N samples into
(N - window) // hop + 1 frames, a 4x subsampling turns T frames into ((T - 3) // 2 - 1) // 2 + 1.
Below some N a length reaches 0 or less, and each runtime fails in its own way on it
(onnxruntime: "Invalid input shape: {0}", LiteRT: "XNNPack delegate failed to reshape", TF:
"Computed output size would be negative") or, as XLA does, quietly returns no frames at all. So
the shortest input is a property of the compiled graph, found here once, and every place that
takes audio (the manifests a pipeline reads, `seqc decode` on a checkpoint or an artifact, the
manifest of an exported artifact) applies this one number.

Why from the graph and not from the layers' arguments: the graph already holds every length as
an expression of the input's symbol (`((N-400)//160+1)`, the form `GraphBuilder._conv_length`
writes), whatever layers made it, so a new layer that changes the time axis' rate needs no rule
of its own here.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator, Mapping
from fractions import Fraction
from functools import lru_cache

from seqc.compiler.graph import Dim, Graph

AUDIO_INPUT = "audio"
"""The forward input that holds a speech model's samples [B, N]."""

_LIMIT = 1 << 40
"""Past this many steps a length is taken to never fit (a graph that no input runs)."""


@lru_cache(maxsize=256)
def _parse(expr: str) -> ast.expr:
    return ast.parse(expr, mode="eval").body


def _names(expr: str) -> set[str]:
    return {n.id for n in ast.walk(_parse(expr)) if isinstance(n, ast.Name) and n.id != "ceil"}


def dim_value(dim: Dim, sizes: Mapping[str, int]) -> int:
    """The size of a dim (an int, a symbol or an expression of symbols) for these symbol sizes.

    Exact integer arithmetic over the few forms the graph builder writes (`+ - * / //`,
    `ceil(...)`); anything else is a ValueError rather than a guess, since a wrong size here
    would accept audio the model cannot run."""
    if isinstance(dim, int):
        return dim
    return int(_evaluate(_parse(dim), sizes, dim))


def _evaluate(node: ast.expr, sizes: Mapping[str, int], text: str) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return Fraction(node.value)
    if isinstance(node, ast.Name) and node.id in sizes:
        return Fraction(sizes[node.id])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, sizes, text)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "ceil"
        and len(node.args) == 1
        and not node.keywords
    ):
        return Fraction(math.ceil(_evaluate(node.args[0], sizes, text)))
    if isinstance(node, ast.BinOp):
        a, b = _evaluate(node.left, sizes, text), _evaluate(node.right, sizes, text)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.Div):
            return a / b
        if isinstance(node.op, ast.FloorDiv):
            return Fraction(math.floor(a / b))
    raise ValueError(f"not a dim expression seqc writes: {text!r}")


def _dims(graph: Graph) -> Iterator[Dim]:
    """Every dim of every value of the graph and of its scan bodies."""
    for op in graph.ops:
        yield from op.type.shape
    for body in graph.subgraphs.values():
        yield from _dims(body)


def shortest(graph: Graph, symbol: str) -> int:
    """The smallest size of `symbol` (at least 1) at which every length the graph derives from
    it is at least 1; the graph's other symbols at their smallest, 1.

    The lengths the graph builder writes never shrink as the input grows (sums, products and
    divisions by positive constants, floors and ceilings of them), so the smallest size that
    fits is found by doubling, then bisecting."""
    exprs = {d for d in _dims(graph) if isinstance(d, str) and symbol in _names(d)}
    others = {n for e in exprs for n in _names(e)} - {symbol}

    def fits(n: int) -> bool:
        sizes = dict.fromkeys(others, 1) | {symbol: n}
        return all(dim_value(e, sizes) >= 1 for e in exprs)

    high = 1
    while not fits(high):
        if high > _LIMIT:
            raise ValueError(f"no size of `{symbol}` gives every length of the graph")
        high *= 2
    low = high // 2  # does not fit (or is 0)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle) else (middle, high)
    return high


def min_audio_samples(graph: Graph) -> int:
    """The fewest samples a speech model's `audio` input may hold: where its front end and
    subsampling leave at least one frame (1 for a graph without such an input: an utterance
    holds at least one sample)."""
    vid = graph.inputs.get(AUDIO_INPUT)
    if vid is None:
        return 1
    shape = graph.ops[vid].type.shape
    if len(shape) != 2 or not isinstance(shape[1], str):
        return 1
    return shortest(graph, shape[1])
