"""A task's model: its call, `--set` overrides of its params, and its tree of instances.

The model line (`model = TransformerLM(vocab = input.vocab_size)`) may read the task's input,
so it is resolved after the input; an override of one param (`lm.model.d = 128`) replaces that
argument of the call before it is bound, so a param whose default is computed from another
(`ff: int = 4 * d`) follows the override. A vocabulary size known only once the data is read
stays a `Symbol` until the run supplies it.
"""

from __future__ import annotations

from typing import Any

from seqc.resolve.layers.binding import bind_user_layer_spans, layer_context, layer_kind_spec
from seqc.resolve.layers.instance import LayerInstance, instantiate
from seqc.resolve.provenance import DEFAULT, Origin, record
from seqc.resolve.raw import Raw, RawCall, RawName, evaluate
from seqc.resolve.setting import Setter
from seqc.resolve.statements import Stmt
from seqc.resolve.values import CallValue, Symbol
from seqc.spec import ir
from seqc.spec.errors import CheckError, Note, ResolveError, did_you_mean


class ModelResolver(Setter):
    """Resolves a task's model (`resolve_model`); a part of `Resolver`."""

    def resolve_model(
        self,
        task: str,
        model_stmt: Stmt,
        overrides: list[Stmt],
        input_config: dict[str, Any],
    ) -> tuple[CallValue, LayerInstance]:
        """The bound call of `task`'s model, with `overrides` of its params, and its instances."""

        def lookup(expr: ir.Expr) -> Raw | None:
            is_input = isinstance(expr, ir.Attr) and isinstance(expr.obj, ir.Name)
            if is_input and expr.obj.id == "input":  # type: ignore[union-attr]
                return Raw(self._input_attr(input_config, expr), expr.span)  # type: ignore[arg-type]
            return None

        assert model_stmt.value is not None
        raw = evaluate(model_stmt.value, lookup)
        func = raw.value.func if isinstance(raw.value, RawCall) else None
        if isinstance(raw.value, RawName):
            func = raw.value.id
            raw = Raw(RawCall(func, raw.span, [], {}), raw.span)
        if func is None or func not in self.layers:
            models = sorted(n for n, d in self.layers.items() if d.kind == "model")
            raise CheckError(
                "a task's model is a call of a declared `model`",
                span=raw.span if func is None else raw.value.func_span,
                code="unknown-model",
                expected=f"one of {', '.join(models) or '(none declared)'}",
                found=f"`{func}`" if func else raw.describe(),
                suggestion=did_you_mean(func, models) if func else None,
            )
        decl = self.layers[func]
        assert isinstance(raw.value, RawCall)
        call = raw.value
        spec = layer_kind_spec(decl)
        if overrides:
            # Overrides are by name; turn positional arguments into named ones first.
            kwargs = {n: (a, a.span) for n, a in zip(spec.param_names, call.args, strict=False)}
            kwargs.update(call.kwargs)
            call = RawCall(call.func, call.func_span, call.args[len(spec.params) :], kwargs)
        for st in overrides:
            pname = st.path[2]
            if spec.param(pname) is None:
                raise ResolveError(
                    f"model `{func}` has no param `{pname}`",
                    span=st.span,
                    code="unknown-param",
                    expected=f"one of {', '.join(spec.param_names)}",
                    found=f"`{pname}`",
                    suggestion=did_you_mean(pname, spec.param_names),
                    notes=[Note(decl.span, f"`{func}` is declared here")] if decl.span else [],
                )
            assert st.value is not None
            call.kwargs[pname] = (evaluate(st.value, lookup), st.span)
        ctx = layer_context(self.layers)
        bound, spans = bind_user_layer_spans(decl, call.args, call.kwargs, raw.span, ctx)
        path = f"{task}.model"
        record(
            self.prov,
            self.layers,
            path,
            Raw(RawCall(func, None, [], {}), raw.span),
            model_stmt.origin,
        )
        self._record_model_args(path, decl, call, model_stmt, overrides)
        cache = self.program.instances
        instance = instantiate(decl, bound.args, self.layers, "", raw.span, cache, spans)
        return bound, instance

    def _record_model_args(
        self,
        path: str,
        decl: ir.LayerDecl,
        call: RawCall,
        model_stmt: Stmt,
        overrides: list[Stmt],
    ) -> None:
        written = {p.name for p in decl.params[: len(call.args)]} | set(call.kwargs)
        for p in decl.params:
            origin = model_stmt.origin if p.name in written else DEFAULT
            if p.name not in written and p.default is not None and _refers(p.default):
                origin = Origin(kind="default", where=f"computed at {p.default.span}")
            self.prov[f"{path}.{p.name}"] = origin
        for st in overrides:
            self.prov[f"{path}.{st.path[2]}"] = st.origin

    def _input_attr(self, input_config: dict[str, Any], expr: ir.Attr) -> Any:
        name = expr.name
        if name == "vocab_size":
            tok = input_config.get("tokenizer")
            if isinstance(tok, CallValue) and isinstance(tok.args.get("vocab_size"), int):
                return tok.args["vocab_size"]
            if isinstance(tok, CallValue) and tok.kind == "bytes":
                return 260  # 256 byte values + pad, bos, eos, unk (seqc.data.tokenizers)
            ref = f"{input_config['name']}.vocab_size"
            return self.symbols.get(ref, Symbol(ref=ref))
        if name in input_config:
            return input_config[name]
        known = ["vocab_size", *input_config]
        raise CheckError(
            f"input has no attribute `{name}`",
            span=expr.span,
            code="unknown-name",
            expected=f"one of {', '.join(known)}",
            found=f"`{name}`",
            suggestion=did_you_mean(name, known),
        )


def _refers(expr: ir.Expr) -> bool:
    if isinstance(expr, ir.Name):
        return True
    if isinstance(expr, ir.BinOp):
        return _refers(expr.left) or _refers(expr.right)
    if isinstance(expr, ir.Neg):
        return _refers(expr.operand)
    return False
