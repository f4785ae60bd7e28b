"""A task's config: its fields, its input and its model, with the experiment's lines for it.

A task's own body comes first, then the experiment's lines that set its fields
(`lm.loss = ...`); `input` and `model` are kept aside and resolved last, input first, so that a
model argument that reads the input (`vocab = input.vocab_size`) sees every override of it.
"""

from __future__ import annotations

from typing import Any

from seqc.resolve.conform import Context
from seqc.resolve.inputs import InputResolver
from seqc.resolve.layers.instance import LayerInstance
from seqc.resolve.models import ModelResolver
from seqc.resolve.setting import block_spec
from seqc.resolve.statements import Stmt, body_assignments
from seqc.spec import ir
from seqc.spec.errors import CheckError, ResolveError, did_you_mean


class TaskResolver(InputResolver, ModelResolver):
    """Resolves a task (`resolve_task`); a part of `Resolver`."""

    def resolve_task(self, name: str, stmts: list[Stmt]) -> tuple[dict[str, Any], LayerInstance]:
        """Task `name`'s config and model instance, with the experiment's `stmts` for it."""
        decl = self.program.tasks[name]
        spec = block_spec("task")
        task_stmts = body_assignments(decl.body, (name,), "task")
        config: dict[str, Any] = self.defaults(spec, name)
        input_name: str | None = None
        input_stmts: list[Stmt] = []
        model_stmt: Stmt | None = None
        model_overrides: list[Stmt] = []
        for st in [*task_stmts, *stmts]:
            field_name = st.path[1] if len(st.path) > 1 else None
            if field_name is None:
                raise ResolveError(
                    f"`{name}` is a task",
                    span=st.span,
                    code="block-assign",
                    hint=f"set one of its fields, e.g. `{name}.loss = ...`",
                )
            if field_name == "input":
                if len(st.path) == 2:
                    input_name, input_stmts = self._input_ref(st), []
                    self.prov[f"{name}.input.name"] = st.origin
                else:
                    input_stmts.append(st)
            elif field_name == "model":
                if len(st.path) == 2:
                    model_stmt, model_overrides = st, []
                elif len(st.path) == 3:
                    model_overrides.append(st)
                else:
                    raise ResolveError(
                        "model params are set one level deep, e.g. `lm.model.d = 512`",
                        span=st.span,
                        code="unknown-field",
                        found=".".join(st.path),
                    )
            else:
                self.set_path(config, spec, st.path, 1, st, Context(bare_strings=st.bare_strings))
        if input_name is None:
            raise ResolveError(
                f"task `{name}` has no `input`",
                span=decl.span,
                code="missing-param",
                hint="add `input = <name of an input block>`",
            )
        if model_stmt is None:
            raise ResolveError(
                f"task `{name}` has no `model`",
                span=decl.span,
                code="missing-param",
                hint="add `model = SomeModel(...)`",
            )
        config["input"] = self.resolve_input(name, input_name, input_stmts)
        config["model"], instance = self.resolve_model(
            name, model_stmt, model_overrides, config["input"]
        )
        return config, instance

    def _input_ref(self, st: Stmt) -> str:
        """The name of the input block a task's `input = ...` line names."""
        assert st.value is not None
        ref = st.value
        found = ref.id if isinstance(ref, ir.Name) else None
        if found is None and isinstance(ref, ir.String):
            found = ref.value
        if found is None or found not in self.program.inputs:
            raise CheckError(
                "unknown input" + (f" `{found}`" if found else ""),
                span=ref.span,
                code="unknown-input",
                expected=f"one of {', '.join(sorted(self.program.inputs)) or '(none declared)'}",
                found=f"`{found}`" if found else type(ref).__name__.lower(),
                suggestion=did_you_mean(found, self.program.inputs) if found else None,
            )
        return found
