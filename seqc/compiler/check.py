"""`seqc check`: every declaration of a program, used or not, and every experiment.

Checking unused declarations too is deliberate: a layer nobody instantiates yet is still a
layer someone will, and its error belongs to the line that wrote it, today.
"""

from __future__ import annotations

from seqc.resolve.experiment import ResolvedExperiment, Resolver, resolve
from seqc.resolve.layers import check_layers
from seqc.resolve.program import Program
from seqc.spec.parser import gc_paused


def check_program(
    program: Program, experiment: str | None = None, overrides: list[str] | None = None
) -> list[ResolvedExperiment]:
    """Check all layers, inputs and tasks, and resolve one experiment (or all of them).

    The garbage collector is paused, as for a parse: what is built here stays alive until the
    check ends, and the collector's passes over a large program's IR cost a quarter of it.
    """
    with gc_paused():
        check_layers(program)
        resolver = Resolver(program)
        for name in program.inputs:
            resolver.resolve_input(None, name, [])
        for name in program.tasks:
            resolver.resolve_task(name, [])
        names = [experiment] if experiment is not None else list(program.experiments)
        resolved = [resolve(program, n, overrides) for n in names]
        for r in resolved:
            _check_shares(program, r)
        return resolved


def _check_shares(program: Program, resolved: ResolvedExperiment) -> None:
    """A share's uses hold the same weights: known only once the tasks' models are lowered
    (`seqc.compiler.multitask`), which `check` does for an experiment with shares when every
    size is in the spec (a size that waits on the data is checked when a run reads it)."""
    if not resolved.config.get("share"):
        return
    from seqc.compiler.compile import data_symbols
    from seqc.compiler.multitask import compile_tasks

    if not any(data_symbols(resolved, t) for t in resolved.tasks):
        compile_tasks(program, resolved)
