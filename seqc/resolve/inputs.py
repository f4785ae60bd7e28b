"""An input block's config, on its own or as one task sees it (with the task's overrides).

An input is resolved like a block: the catalogue's defaults, then its own body, then the lines
of a task or experiment that set its fields (`lm.input.tokenizer.vocab_size = 2000`). Without
such lines it is the same for every experiment, so it is cached in the program.
"""

from __future__ import annotations

from typing import Any

from seqc.resolve.conform import Context
from seqc.resolve.provenance import DEFAULT
from seqc.resolve.setting import Setter, block_spec
from seqc.resolve.statements import Stmt, body_assignments
from seqc.spec.errors import CheckError


class InputResolver(Setter):
    """Resolves input blocks (`resolve_input`); a part of `Resolver`."""

    def resolve_input(self, task: str | None, input_name: str, stmts: list[Stmt]) -> dict[str, Any]:
        """An input's config as seen by `task` (with that task's overrides), or on its own.

        Without overrides it is the same for every experiment: kept in the program's cache
        (with the provenance it records) for as long as the input's declaration is unchanged.
        """
        if stmts:
            return self._resolve_input(task, input_name, stmts)
        decl = self.program.inputs[input_name]
        key = ("seqc.resolve.experiment.input", task, input_name)
        hit = self.program.instances.get(key)
        if hit is None or hit[0] is not decl:
            outer, self.prov = self.prov, {}
            try:
                config = self._resolve_input(task, input_name, [])
                hit = self.program.instances[key] = (decl, config, self.prov)
            finally:
                self.prov = outer
        self.prov.update(hit[2])
        return dict(hit[1])

    def _resolve_input(
        self, task: str | None, input_name: str, stmts: list[Stmt]
    ) -> dict[str, Any]:
        decl = self.program.inputs[input_name]
        spec = block_spec("input")
        head = (task, "input") if task is not None else (input_name,)
        prefix = ".".join(head)
        config = {"name": input_name, **self.defaults(spec, prefix)}
        self.prov[f"{prefix}.name"] = self.prov.get(prefix, DEFAULT)
        own = body_assignments(decl.body, head, "input")
        for st in [*own, *stmts]:
            self.set_path(
                config, spec, st.path, len(head), st, Context(bare_strings=st.bare_strings)
            )
        for p in spec.params:
            if p.required and p.name not in config:
                raise CheckError(
                    f"input `{input_name}` needs `{p.name}`",
                    span=decl.span,
                    code="missing-param",
                    expected=f"`{p.name}: {p.type}` ({p.doc})",
                )
        return config
