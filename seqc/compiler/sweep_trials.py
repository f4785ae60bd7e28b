"""A sweep's trial checked before it trains: its experiment is the base plus the trial's
values as `--set` overrides, checked as `seqc check -e` checks an experiment, so values that
break a rule between params (`d % heads`) are found in milliseconds, not by a crashed run.

It lives here, beside `check_program`, and not in `seqc.resolve.sweep`: the checks a run makes
on the spec alone (the mix, the mesh, the sharding plan) are the compiler's, a stage above
resolution, which may not import it.
"""

from __future__ import annotations

from typing import Any

from seqc.compiler.check import check_program
from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.program import Program
from seqc.resolve.sweep import ResolvedSweep, trial_overrides


def check_trial(
    program: Program, sweep: ResolvedSweep, values: dict[str, Any]
) -> ResolvedExperiment:
    """The trial's resolved experiment; the located error of `seqc check` where it breaks a
    rule."""
    (resolved,) = check_program(program, sweep.experiment, trial_overrides(sweep, values))
    return resolved
