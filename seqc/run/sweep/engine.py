"""A sweep's sampler and pruner as Optuna's own objects, from the spec's `Component`s.

Nothing here samples or prunes: each spec kind maps to the Optuna class that does, with the
spec's argument names (`asha(min_steps, reduction)`) translated to Optuna's. The seed of a
sampler is mixed with a worker's index and the trial count, so that two workers asking at the
same moment do not draw the same random start, and one worker's sweep repeats exactly (the
grid sampler's seed orders its grid, which all workers must share: it is not mixed).
"""

from __future__ import annotations

from typing import Any

import optuna

from seqc.resolve.sweep import Component, Distribution, ResolvedSweep


def grid_space(space: tuple[Distribution, ...]) -> dict[str, list[Any]]:
    """Every value of a finite space, for the grid sampler (the resolver refused any other)."""
    grid: dict[str, list[Any]] = {}
    for dist in space:
        if dist.kind == "choice":
            grid[dist.path] = list(dist.choices)
        else:
            assert dist.low is not None and dist.high is not None
            step = int(dist.step or 1)
            grid[dist.path] = list(range(int(dist.low), int(dist.high) + 1, step))
    return grid


def sampler(sweep: ResolvedSweep, salt: int = 0) -> optuna.samplers.BaseSampler:
    """The sweep's sampler, its seed (default 0) offset by `salt`."""
    spec: Component = sweep.sampler
    args = dict(spec.args)
    seed = args.pop("seed", 0)
    seed = None if seed is None else int(seed) + salt
    if spec.kind == "tpe":
        return optuna.samplers.TPESampler(seed=seed, **args)
    if spec.kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.kind == "grid":
        # the seed shuffles the grid's order, and every worker must see one order: no salt
        base = spec.args.get("seed", 0)
        return optuna.samplers.GridSampler(grid_space(sweep.space), seed=base)
    if spec.kind == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, **args)
    raise ValueError(f"unknown sampler {spec.kind!r}")  # the resolver refused it first


def pruner(sweep: ResolvedSweep) -> optuna.pruners.BasePruner:
    """The sweep's pruner; steps are training steps (the dev metric is reported at each)."""
    spec = sweep.pruner
    args = spec.args
    if spec.kind == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=int(args.get("min_steps", 1)),
            reduction_factor=int(args.get("reduction", 3)),
            min_early_stopping_rate=int(args.get("min_early_stopping_rate", 0)),
        )
    if spec.kind == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=int(args.get("startup_trials", 5)),
            n_warmup_steps=int(args.get("warmup_steps", 0)),
        )
    if spec.kind == "none":
        return optuna.pruners.NopPruner()
    raise ValueError(f"unknown pruner {spec.kind!r}")


def suggest(trial: optuna.Trial, dist: Distribution) -> Any:
    """One value of `dist` for `trial`, named by its override path."""
    name = dist.path
    if dist.kind == "choice":
        return trial.suggest_categorical(name, list(dist.choices))
    assert dist.low is not None and dist.high is not None
    if dist.kind in ("intrange", "logintrange"):
        step = int(dist.step or 1)
        log = dist.kind == "logintrange"
        return trial.suggest_int(
            name, int(dist.low), int(dist.high), step=1 if log else step, log=log
        )
    if dist.kind == "loguniform":
        return trial.suggest_float(name, float(dist.low), float(dist.high), log=True)
    return trial.suggest_float(
        name,
        float(dist.low),
        float(dist.high),
        step=None if dist.step is None else float(dist.step),
    )
