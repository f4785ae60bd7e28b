"""What a training run refuses that the spec alone decides: `seqc check` finds it without data.

`seqc check` (and so the editor, whose diagnostics run the same `check_program`) and `seqc
train` call these same functions: a spec that `check` passes is one that `train` does not
refuse for a reason the spec states. What needs the run itself (the backend, the processes of
a cluster, the devices that really exist) or the data (a vocabulary a tokenizer learns) stays
with the run (`seqc.run.train.checks`), and so does what needs the model lowered
(`seqc.compiler.check` runs those where the model lowers without data).

Every refusal is at the value that asked for it: the spec line, or the `--set` on the command
line, that set it (`where`), with a note at the other value of a conflict, and a hint that
names the setting that fixes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from seqc.compiler.config import Adam, OptimizerConfig
from seqc.compiler.origins import notes_at, where
from seqc.compiler.sharding import mesh_of
from seqc.resolve.experiment import ResolvedExperiment
from seqc.spec.errors import CheckError, did_you_mean


def check_run(resolved: ResolvedExperiment, several: bool = False) -> None:
    """Everything of this module, in the order a run meets it. `several`: the run has several
    processes (known to `seqc train` only; `seqc check` asks about one)."""
    check_mesh_devices(resolved)
    check_pipeline(resolved)
    check_async_placement(resolved)
    check_augment(resolved)
    if len(resolved.tasks) > 1:
        mix_weights(resolved)
        check_multitask(resolved, several)
    else:
        check_lazy_rows(resolved, several)


# ---------------------------------------------------------------------------------- the mix


def mix_weights(resolved: ResolvedExperiment) -> dict[str, float]:
    """Each task's weight in a multi-task experiment's mix (not normalised), checked at the
    train block's lines: every task named in `mix` and `lr_scale` is a task of the experiment;
    `mix`, when given, weighs every task; every task trains (weight > 0); a per-task learning
    rate needs steps of one task (not `sum`)."""
    train, tasks = resolved.config["train"], tuple(resolved.tasks)
    given = dict(train["mix"])
    span = where(resolved, "train.mix", "train")
    for field in ("mix", "lr_scale"):
        for name in train[field]:
            if name not in tasks:
                raise CheckError(
                    f"`train.{field}` names `{name}`, which is not a task of this experiment",
                    span=where(resolved, f"train.{field}", "train"),
                    code="unknown-task",
                    expected=", ".join(tasks),
                    suggestion=did_you_mean(name, tasks),
                    hint=f"name the tasks of `tasks`, or add `{name}` to them",
                )
    if given:
        missing = [t for t in tasks if t not in given]
        if missing:
            raise CheckError(
                f"`train.mix` gives no weight to {', '.join(f'`{t}`' for t in missing)}",
                span=span,
                code="mix-incomplete",
                hint="give every task of the experiment a weight",
            )
        weights = {t: float(given[t]) for t in tasks}
    else:
        weights = {t: float(resolved.config[t]["weight"]) for t in tasks}
    idle = [t for t, w in weights.items() if w <= 0.0]
    if idle and len(tasks) > 1:
        raise CheckError(
            f"task {', '.join(f'`{t}`' for t in idle)} has weight 0 in the mix: it would "
            "never train",
            span=span if given else where(resolved, f"{idle[0]}.weight") or span,
            code="mix-zero",
            hint="give it a weight > 0, or leave it out of `tasks`",
        )
    if train["mix_by"] == "sum" and train["lr_scale"]:
        at = where(resolved, "train.lr_scale")
        raise CheckError(
            '`train.lr_scale` scales the steps of one task, but `mix_by = "sum"` takes one '
            "step on every task's loss together",
            span=at,
            code="lr-scale-with-sum",
            hint="weigh the tasks' losses with `train.mix` instead, or mix by sample or "
            "round_robin",
            notes=notes_at(resolved, at, ("train.mix_by", '`mix_by = "sum"` is set here')),
        )
    return weights


# ---------------------------------------------------------------------------------- devices


def _mesh_text(mesh: Mapping[str, int]) -> str:
    return "{" + ", ".join(f"{a}: {n}" for a, n in mesh.items()) + "}"


def check_mesh_devices(resolved: ResolvedExperiment) -> None:
    """A mesh needs a device per slot: more than `distribution.devices` lists is refused at the
    mesh (fewer is fine: a placement plans over the devices, a mesh of one uses one of them)."""
    devices = resolved.config["distribution"]["devices"] or []
    mesh = mesh_of(resolved)
    need = math.prod(mesh.values())
    if not devices or need <= len(devices):
        return
    at = where(resolved, "distribution.mesh", "distribution.devices")
    raise CheckError(
        f"the mesh {_mesh_text(mesh)} needs {need} devices, but `distribution.devices` lists "
        f"{len(devices)}",
        span=at,
        code="mesh-devices",
        expected=f"at most {len(devices)} devices in the mesh",
        found=f"{need}",
        hint="make the mesh's product at most the number of devices, or list the devices the "
        f"run has (distribution.devices = {need} x ...)",
        notes=notes_at(resolved, at, ("distribution.devices", "the devices are listed here")),
    )


def check_pipeline(resolved: ResolvedExperiment) -> None:
    """A stage axis and a pipeline come together, on JAX, for one task, without a model axis
    (`seqc.compiler.pipeline.plan`; what needs the model lowered is checked with it)."""
    from seqc.compiler.pipeline.plan import check_pipeline_spec, pipeline_axes, wants_pipeline

    if wants_pipeline(resolved):
        check_pipeline_spec(resolved, *pipeline_axes(resolved))


def check_async_placement(resolved: ResolvedExperiment) -> None:
    """Asynchronous training runs each step whole on one worker: it places no ops."""
    dist = resolved.config["distribution"]
    placement = dist["placement"]
    if dist["sync"] != "async" or placement.kind == "single":
        return
    at = where(resolved, "distribution.placement")
    raise CheckError(
        f"asynchronous training runs each step whole on a worker; it cannot place ops by "
        f"`placement = {placement.kind}`",
        span=at,
        code="cannot-place",
        hint="set distribution.placement = single",
        notes=notes_at(resolved, at, ("distribution.sync", '`sync = "async"` is set here')),
    )


def check_augment(resolved: ResolvedExperiment) -> None:
    """Augmentation (`input.augment`) transforms audio: an input of text has none to change."""
    for task in resolved.tasks:
        cfg = resolved.config[task]["input"]
        train = cfg.get("train")
        if not cfg.get("augment") or getattr(train, "kind", None) == "audio_manifest":
            continue
        at = where(resolved, f"{task}.input.augment")
        raise CheckError(
            f"task `{task}`'s input `{cfg.get('name', 'input')}` reads text; `augment` "
            "transforms the audio of a speech input",
            span=at,
            code="augment-needs-audio",
            hint="remove `augment`, or read the training data with audio_manifest(...)",
        )


# ------------------------------------------------------------- what is not implemented yet


def _lazy(resolved: ResolvedExperiment) -> bool:
    opt = OptimizerConfig.of(resolved.config["train"]["optimizer"])
    return isinstance(opt, Adam) and opt.lazy_rows


def _one_device(resolved: ResolvedExperiment, several: bool) -> tuple[str, str, str, str] | None:
    """What spreads a step over several devices: (what, its path, the fix, the note at its
    line), or None for a step on one device of one process."""
    dist = resolved.config["distribution"]
    mesh = mesh_of(resolved)
    if math.prod(mesh.values()) > 1:
        return (
            f"a mesh of devices ({_mesh_text(mesh)})",
            "distribution.mesh",
            "set distribution.mesh = {data: 1}",
            "the mesh is set here",
        )
    if several:
        return (
            "several processes",
            "distribution.mesh",
            "start it as one process (without seqc launch)",
            "",
        )
    kind = dist["placement"].kind
    if kind != "single":
        return (
            f"`placement = {kind}` (ops placed on several devices)",
            "distribution.placement",
            "set distribution.placement = single",
            f"`placement = {kind}` is set here",
        )
    return None


def _not_implemented(
    resolved: ResolvedExperiment,
    message: str,
    asked: tuple[str, ...],
    fix: str,
    conflict: tuple[str, str] | None,
) -> CheckError:
    """A refusal at the first of `asked` that was set, with a note at the conflicting value."""
    at = where(resolved, *asked)
    notes = notes_at(resolved, at, conflict) if conflict and conflict[1] else []
    return CheckError(message, span=at, code="not-implemented", hint=fix, notes=notes)


def check_lazy_rows(resolved: ResolvedExperiment, several: bool = False) -> None:
    """`adam(lazy_rows = true)` runs on one device of one process, one batch per update."""
    if not _lazy(resolved):
        return
    spread = _one_device(resolved, several)
    if spread is not None:
        why, path, fix, note = spread
    elif resolved.config["train"]["accumulate"] > 1:
        why, path = "gradient accumulation (train.accumulate > 1)", "train.accumulate"
        fix, note = "set train.accumulate = 1", "`accumulate` is set here"
    else:
        return
    raise _not_implemented(
        resolved,
        f"adam(lazy_rows = true) is implemented for one device and one batch per update, not "
        f"for {why}",
        ("train.optimizer.lazy_rows", path, "train"),
        f"{fix}, or set lazy_rows = false (the dense update)",
        (path, note),
    )


def check_multitask(resolved: ResolvedExperiment, several: bool = False) -> None:
    """A multi-task model trains on one device of one process (each task's steps over the
    shared params), and its lazy rows update one task's step at a time."""
    spread = _one_device(resolved, several)
    if spread is not None:
        why, path, fix, note = spread
        asked: tuple[str, ...] = (path, "tasks")
        if path == "distribution.placement":
            fix += " (`seqc place -e EXP -a ALGORITHM` still plans it)"
        fix += ", or train one task per experiment"
    elif resolved.config["train"]["mix_by"] == "sum" and _lazy(resolved):
        why, path = 'lazy rows with `mix_by = "sum"`', "train.mix_by"
        asked = ("train.optimizer.lazy_rows", path, "train")
        fix = 'set lazy_rows = false, or mix by "sample" or "round_robin"'
        note = '`mix_by = "sum"` is set here'
    else:
        return
    raise _not_implemented(
        resolved,
        f"a multi-task model trains on one device of one process; {why} is not implemented for it",
        asked,
        fix,
        (path, note),
    )
