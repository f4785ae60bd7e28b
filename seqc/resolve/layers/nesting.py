"""How user layers contain each other: no layer inside itself, and at most `MAX_LAYER_DEPTH` deep.

Instantiation and lowering recurse through the containment of user layers, so a cycle would
never end and a very deep chain would end in a RecursionError; both are refused here, at a line
of the spec, once every declaration has been checked on its own.
"""

from __future__ import annotations

from seqc.spec import ir
from seqc.spec.errors import CheckError

MAX_LAYER_DEPTH = 100
"""How deeply user layers may contain each other (README, "Trust and limits"): instantiation and
lowering recurse a few Python frames per level, and 100 levels leave them room under Python's
limit of 1,000 frames, as `MAX_NESTING` does for syntax. Real models nest a handful deep."""


def check_layer_cycles(uses: dict[str, list[str]], layers: dict[str, ir.LayerDecl]) -> None:
    """A layer may not contain itself, directly or through others; nor contain user layers more
    than `MAX_LAYER_DEPTH` deep. A walk with its own stack: a chain of thousands of layers is
    an error at its line, not a RecursionError."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    depth: dict[str, int] = {}  # user layers nested in a layer, itself included
    for root in uses:
        if root in state:
            continue
        state[root] = 1
        path, pending = [root], [iter(uses.get(root, []))]
        while pending:
            dep = next(pending[-1], None)
            if dep is None:
                name = path.pop()
                pending.pop()
                state[name] = 2
                depth[name] = 1 + max((depth.get(d, 0) for d in uses.get(name, [])), default=0)
                continue
            if state.get(dep) == 1:
                chain = [*path[path.index(dep) :], dep]
                raise CheckError(
                    f"layer `{dep}` contains itself",
                    span=layers[dep].span,
                    code="layer-cycle",
                    found=" -> ".join(chain),
                )
            if state.get(dep) is None:
                state[dep] = 1
                path.append(dep)
                pending.append(iter(uses.get(dep, [])))
    deepest = max(depth, key=lambda name: depth[name], default=None)  # contained by none
    if deepest is not None and depth[deepest] > MAX_LAYER_DEPTH:
        raise _too_deep(deepest, uses, depth, layers)


def _too_deep(
    top: str, uses: dict[str, list[str]], depth: dict[str, int], layers: dict[str, ir.LayerDecl]
) -> CheckError:
    """The error at the sub-layer call one level past the limit, on a deepest chain from `top`
    (the outermost layer), as the parser reports syntax nested too deeply."""
    chain = [top]
    while len(chain) <= MAX_LAYER_DEPTH:
        chain.append(max(uses.get(chain[-1], []), key=lambda d: depth.get(d, 0)))
    outer, inner = layers[chain[-2]], chain[-1]
    call = next(
        (
            s
            for s in outer.sublayers
            if isinstance(s.call.func, ir.Name) and s.call.func.id == inner
        ),
        None,
    )
    return CheckError(
        f"user layers nest more than {MAX_LAYER_DEPTH} deep here",
        span=call.span if call is not None else outer.span,
        code="too-deep",
        expected=f"at most {MAX_LAYER_DEPTH} user layers, each inside the one before",
        found=f"{top} -> {chain[1]} -> ... -> {chain[-2]} -> {inner}",
        hint="for a stack of identical layers use `repeat(n)`, which adds no depth",
    )
