"""Lowering of user layers: evaluate a forward body over an instance tree into graph ops.

Values in a forward body are tensors (graph value ids) or plain numbers (params such as `d`).
A call of a sub-layer lowers it at its own layer path (`blocks.3.attn`), so params are named by
path; a `repeat(n)` sub-layer applies its n copies in sequence (refused at its line when the
copies would grow the graph past `MAX_GRAPH_OPS`, foreseen from the first one). Inputs are
checked against the declared tensor types at every call, so a width mismatch is reported at the
user's call, with both shapes, long before any backend runs.
"""

from __future__ import annotations

from typing import Any

from seqc.compiler.graph import (
    MAX_GRAPH_OPS,
    Dim,
    Graph,
    GraphBuilder,
    Shape,
    TensorType,
    too_large,
)
from seqc.compiler.lower.call import LOWERINGS, MASKS, LayerCall
from seqc.resolve.layers.instance import LayerInstance
from seqc.spec import ir
from seqc.spec.errors import CheckError

Value = int | float  # a tensor id (int tagged by `_Tensor`) or a number


class _Tensor(int):
    """A graph value id, told apart from a plain int param value."""


def lower_model(
    decl: ir.LayerDecl,
    instance: LayerInstance,
    layers: dict[str, ir.LayerDecl],
    *,
    training_form: bool = False,
) -> Graph:
    """The op graph of a model's forward pass; its inputs are the forward's params. With
    `training_form`, layers that a training step runs differently are lowered as it runs them
    (`GraphBuilder.training_form`)."""
    assert decl.forward is not None
    b = GraphBuilder(training_form)
    b.span = decl.forward.span
    inputs = []
    for p in decl.forward.params:
        b.span = p.span
        inputs.append(_Tensor(b.input(p.name, declared_type(p.type, instance.args))))
    outs = _Lowerer(b, layers).call_user(decl, instance, inputs, {}, decl.forward.span)
    b.graph.outputs = [int(o) for o in outs]
    return b.graph


def declared_type(t: ir.TypeExpr, args: dict[str, Any]) -> TensorType:
    """`float32[B, T, d]` with the layer's params substituted: float32[B, T, 256]."""
    return TensorType(t.name, tuple(_dim(a, args) for a in t.args or ()))


def _dim(e: ir.Expr, args: dict[str, Any]) -> Dim:
    if isinstance(e, ir.TypeExpr):
        v = args.get(e.name)
        return v if isinstance(v, int) and not isinstance(v, bool) else e.name
    if isinstance(e, ir.Number):
        return int(e.value)
    if isinstance(e, ir.BinOp):
        left, right = _dim(e.left, args), _dim(e.right, args)
        if isinstance(left, int) and isinstance(right, int):
            ops = {"+": left + right, "-": left - right, "*": left * right}
            if e.op in ops:
                return ops[e.op]
            if e.op in ("/", "//") and right:
                return left // right
        return f"({left}{e.op}{right})"
    raise CheckError("not a dim", span=e.span, code="bad-dim")


def _shape_text(shape: Shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


class _Lowerer:
    def __init__(self, b: GraphBuilder, layers: dict[str, ir.LayerDecl]) -> None:
        self.b = b
        self.layers = layers

    def _check_inputs(
        self,
        decl: ir.LayerDecl,
        inst: LayerInstance,
        values: dict[str, _Tensor],
        span: ir.Span | None,
    ) -> None:
        """Each input against its declared type; symbolic dims unify within the call."""
        assert decl.forward is not None
        symbols: dict[str, Dim] = {}
        for p in decl.forward.params:
            want = declared_type(p.type, inst.args)
            got = self.b.type(values[p.name])
            ok = got.rank == want.rank and (got.dtype == want.dtype or _float(got, want))
            for dw, dg in zip(want.shape, got.shape, strict=False):
                if not ok:
                    break
                if isinstance(dw, str) and not dw.startswith("("):
                    ok = symbols.setdefault(dw, dg) == dg
                else:
                    ok = dw == dg
            if not ok:
                raise CheckError(
                    f"input `{p.name}` of `{inst.path or decl.name}` ({decl.name}) has the wrong "
                    "shape",
                    span=span,
                    code="shape-mismatch",
                    expected=f"{want.dtype}{_shape_text(want.shape)}"
                    + (f" with {_bindings(symbols)}" if symbols else ""),
                    found=str(got),
                )

    def call_user(
        self,
        decl: ir.LayerDecl,
        inst: LayerInstance,
        inputs: list[_Tensor],
        kwargs: dict[str, _Tensor],
        span: ir.Span | None,
    ) -> list[_Tensor]:
        fwd = decl.forward
        assert fwd is not None
        names = [p.name for p in fwd.params]
        if len(inputs) > len(names) or any(k not in names for k in kwargs):
            raise CheckError(
                f"`{inst.path or decl.name}` takes inputs ({', '.join(names)})",
                span=span,
                code="arity",
                found=f"{len(inputs)} positional, named {sorted(kwargs)}",
            )
        values = dict(zip(names, inputs, strict=False)) | kwargs
        missing = [n for n in names if n not in values]
        if missing:
            raise CheckError(
                f"`{inst.path or decl.name}` needs input `{missing[0]}`",
                span=span,
                code="arity",
                expected=f"inputs ({', '.join(names)})",
            )
        self._check_inputs(decl, inst, values, span)
        children = {c.path.rsplit(".", 1)[-1]: c for c in inst.children}
        siblings = {name: child.path for name, child in children.items()}
        env: dict[str, Any] = dict(inst.args) | values
        for stmt in fwd.body:
            if isinstance(stmt, ir.Let):
                env[stmt.name] = self.expr(stmt.value, env, children, siblings)
                continue
            outs = [self.expr(v, env, children, siblings) for v in stmt.values]
            for v, e in zip(outs, stmt.values, strict=True):
                if not isinstance(v, _Tensor):
                    raise CheckError("a forward returns tensors", span=e.span, code="not-a-tensor")
            for o, t, e in zip(outs, fwd.returns, stmt.values, strict=False):
                want = declared_type(t, inst.args)
                got = self.b.type(o)
                if got.rank != want.rank or any(
                    isinstance(dw, int) and dw != dg
                    for dw, dg in zip(want.shape, got.shape, strict=True)
                ):
                    raise CheckError(
                        f"`{decl.name}` returns {got}, but declares {want}",
                        span=e.span,
                        code="shape-mismatch",
                        expected=str(want),
                        found=str(got),
                    )
            return outs
        raise AssertionError("checked: a forward returns")

    def expr(
        self,
        e: ir.Expr,
        env: dict[str, Any],
        children: dict[str, LayerInstance],
        siblings: dict[str, str],
    ) -> Any:
        b = self.b
        if isinstance(e, ir.Number):
            return e.value
        if isinstance(e, ir.Name):
            return env[e.id]
        if isinstance(e, ir.Neg):
            v = self.expr(e.operand, env, children, siblings)
            if isinstance(v, _Tensor):
                b.span = e.span
                return _Tensor(b.unary("neg", v))
            return -v
        if isinstance(e, ir.BinOp):
            left = self.expr(e.left, env, children, siblings)
            right = self.expr(e.right, env, children, siblings)
            return self._binop(e, left, right)
        if isinstance(e, ir.Call) and isinstance(e.func, ir.Attr):
            assert isinstance(e.func.obj, ir.Name)  # checked: `sublayer.mask(m)`
            child = children[e.func.obj.id]
            args = [self.expr(a, env, children, siblings) for a in e.args]
            return self.mask(child, args, e.span)
        if isinstance(e, ir.Call):
            assert isinstance(e.func, ir.Name)
            child = children[e.func.id]
            args = [self.expr(a, env, children, siblings) for a in e.args]
            kwargs = {k.name: self.expr(k.value, env, children, siblings) for k in e.kwargs}
            for v, a in zip(
                [*args, *kwargs.values()], [*e.args, *(k.value for k in e.kwargs)], strict=True
            ):
                if not isinstance(v, _Tensor):
                    raise CheckError("a layer takes tensors", span=a.span, code="not-a-tensor")
            return self.apply(child, args, kwargs, siblings, e.span)
        raise CheckError("not allowed in a forward body", span=e.span, code="bad-forward")

    def _binop(self, e: ir.BinOp, left: Any, right: Any) -> Any:
        b = self.b
        if not isinstance(left, _Tensor) and not isinstance(right, _Tensor):
            return {"+": left + right, "-": left - right, "*": left * right, "/": left / right}.get(
                e.op, left
            )
        kinds = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
        if e.op not in kinds:
            raise CheckError(f"`{e.op}` is not defined on tensors", span=e.span, code="bad-forward")
        b.span = e.span
        lv = left if isinstance(left, _Tensor) else b.constant(float(left))
        rv = right if isinstance(right, _Tensor) else b.constant(float(right))
        return _Tensor(b.binary(kinds[e.op], lv, rv))

    def apply(
        self,
        child: LayerInstance,
        args: list[_Tensor],
        kwargs: dict[str, _Tensor],
        siblings: dict[str, str],
        span: ir.Span | None,
    ) -> _Tensor:
        copies = child.children if child.repeat else (child,)
        out: _Tensor | None = None
        before = len(self.b.graph.ops)
        for i, copy in enumerate(copies):
            inputs = list(args) if out is None else [out, *args[1:]]
            out = self._apply_one(copy, inputs, kwargs, siblings, span)
            if i == 0 and len(copies) > 1:
                # The copies are alike: foresee the graph's size from the first one, so a
                # repeat too large is refused now, at its line, not after lowering most of it.
                ahead = len(self.b.graph.ops) + (len(copies) - 1) * (len(self.b.graph.ops) - before)
                if ahead > MAX_GRAPH_OPS:
                    raise too_large(ahead, child.path, child.span or span)
        assert out is not None
        return out

    def mask(self, inst: LayerInstance, args: list[Any], span: ir.Span | None) -> _Tensor:
        """`layer.mask(m)`: the padding mask `m` at the rate of the layer's output."""
        fn = MASKS.get(inst.kind) if inst.builtin and not inst.repeat else None
        if fn is None:
            have = ", ".join(sorted(MASKS))
            raise CheckError(
                f"`{inst.path}` ({inst.kind}) has no `.mask(...)`: it keeps the time axis' rate",
                span=span,
                code="no-mask",
                expected=f"a layer that changes the rate: {have}",
                hint="pass the mask you have to the next layer as it is",
            )
        if len(args) != 1 or not isinstance(args[0], _Tensor):
            raise CheckError(f"`{inst.path}.mask` takes one mask tensor", span=span, code="arity")
        saved = (self.b.layer, self.b.span)
        self.b.layer, self.b.span = inst.path, span
        try:
            call = LayerCall(inst.kind, inst.path, inst.args, list(args), {}, {}, span)
            return _Tensor(fn(self.b, call))
        finally:
            self.b.layer, self.b.span = saved

    def _apply_one(
        self,
        inst: LayerInstance,
        args: list[_Tensor],
        kwargs: dict[str, _Tensor],
        siblings: dict[str, str],
        span: ir.Span | None,
    ) -> _Tensor:
        b = self.b
        saved = (b.layer, b.span)
        b.layer, b.span = inst.path, span
        try:
            if inst.builtin:
                lower = LOWERINGS.get(inst.kind)
                if lower is None:
                    raise CheckError(
                        f"layer kind `{inst.kind}` has no lowering yet",
                        span=span,
                        code="not-lowered",
                    )
                call = LayerCall(
                    inst.kind, inst.path, inst.args, list(args), dict(kwargs), siblings, span
                )
                return _Tensor(lower(b, call))
            outs = self.call_user(self.layers[inst.kind], inst, args, kwargs, span)
            if len(outs) != 1:
                raise CheckError(
                    f"`{inst.path}` returns {len(outs)} values; use it where one is expected",
                    span=span,
                    code="arity",
                )
            return outs[0]
        finally:
            b.layer, b.span = saved


def _float(a: TensorType, b: TensorType) -> bool:
    floats = ("float32", "bfloat16", "float16")
    return a.dtype in floats and b.dtype in floats


def _bindings(symbols: dict[str, Dim]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in symbols.items())
