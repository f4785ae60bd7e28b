"""What a built-in layer's lowering receives, and the registry of lowerings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from seqc.compiler.graph import GraphBuilder
from seqc.spec import ir
from seqc.spec.errors import CheckError


@dataclass
class LayerCall:
    """One call of a built-in layer inside a forward body: `attn(norm1(x), mask = m)`."""

    kind: str
    path: str
    args: dict[str, Any]
    inputs: list[int]
    kwargs: dict[str, int] = field(default_factory=dict)
    siblings: dict[str, str] = field(default_factory=dict)
    """Sibling layer name -> its path, for weight tying."""
    span: ir.Span | None = None

    def one_input(self) -> int:
        if len(self.inputs) != 1:
            raise CheckError(
                f"`{self.path}` ({self.kind}) takes one input, got {len(self.inputs)}",
                span=self.span,
                code="arity",
            )
        return self.inputs[0]

    def allow_kwargs(self, *names: str) -> None:
        for k in self.kwargs:
            if k not in names:
                allowed = ", ".join(names) if names else "none"
                raise CheckError(
                    f"`{self.kind}` takes no input named `{k}`",
                    span=self.span,
                    code="unknown-input",
                    expected=f"named inputs: {allowed}",
                )


Lowering = Callable[[GraphBuilder, LayerCall], int]
LOWERINGS: dict[str, Lowering] = {}
MASKS: dict[str, Lowering] = {}
"""Kind -> its `.mask(m)`: a padding mask at the layer's input rate mapped to its output rate
(layers that change the time axis' rate: the audio front end, subsampling)."""


def lowering(kind: str) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        LOWERINGS[kind] = fn
        return fn

    return register


def mask_lowering(kind: str) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        MASKS[kind] = fn
        return fn

    return register


def activation(b: GraphBuilder, fn: str, x: int) -> int:
    """Apply a named elementwise activation ("none" is the identity)."""
    if fn == "none":
        return x
    return b.unary(fn, x)
