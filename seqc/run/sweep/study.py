"""A sweep's study: where it is stored, and the one study every worker of the sweep joins.

The default storage is Optuna's journal file in the sweep's directory (nothing to install,
safe for the processes of one machine). A `--storage` URL with a scheme (`postgresql://`,
`mysql://`, `sqlite:///`) is an Optuna RDB storage, the path for workers on several machines;
it records Optuna's heartbeat, so a worker that dies is found by any other. A journal has no
heartbeat: `seqc.run.sweep.lost` finds those trials by their worker's process instead.

The study remembers what it is a study of (file, experiment, metric, goal, space). A second
`seqc sweep` with the same name and another space is refused rather than mixing two searches'
trials in one history.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

from seqc.resolve.sweep import ResolvedSweep
from seqc.spec.errors import FileError, UsageError

JOURNAL = "study.journal"
HEARTBEAT_S = 10
"""Seconds between a running trial's heartbeats in an RDB storage; it is lost after three."""


def default_dir(sweep: str) -> Path:
    """`runs/sweeps/SWEEP`: the sweep's journal, logs and trial run directories."""
    return Path("runs") / "sweeps" / sweep


def is_url(storage: str) -> bool:
    return "://" in storage


def open_storage(
    storage: str | None,
    folder: Path,
    on_stale: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None,
) -> optuna.storages.BaseStorage:
    """The study's storage: `storage` as a URL, a journal file path, or the default journal."""
    if storage is not None and is_url(storage):
        try:
            with warnings.catch_warnings():  # the heartbeat is "experimental" in Optuna
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return RDBStorage(
                    storage,
                    heartbeat_interval=HEARTBEAT_S,
                    grace_period=3 * HEARTBEAT_S,
                    heartbeat_stale_trial_callback=on_stale,
                )
        except Exception as e:  # sqlalchemy's errors: a driver missing, no server, bad URL
            raise FileError(
                f"cannot open the sweep storage {redacted(storage)}: {_first_line(e)}",
                path=redacted(storage),
                code="sweep-storage",
                hint="check the URL, that the database server runs and accepts this user, "
                "and (for postgresql://) that psycopg is installed (pip install 'seqc[sweep]')",
            ) from None
    path = Path(storage) if storage is not None else folder / JOURNAL
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = JournalFileOpenLock(str(path))
        return JournalStorage(JournalFileBackend(str(path), lock_obj=lock))
    except OSError as e:
        raise FileError(
            f"cannot write the sweep journal {path}: {e.strerror}",
            path=str(path),
            code="sweep-storage",
            hint="choose a writable --dir, or a --storage URL",
        ) from None
    except Exception as e:  # a journal that is not one (another file, corrupted)
        raise FileError(
            f"{path} is not a readable Optuna journal: {_first_line(e)}",
            path=str(path),
            code="sweep-storage",
            hint="move it away, or give the sweep another --dir",
        ) from None


def identity(sweep: ResolvedSweep) -> dict[str, Any]:
    """What the study is a study of; a resumed sweep must match it."""
    space = [d.model_dump(exclude={"span"}) for d in sweep.space]
    text = json.dumps(space, sort_keys=True, default=str)
    return {
        "seqc_sweep": sweep.name,
        "experiment": sweep.experiment,
        "metric": sweep.metric.text,
        "goal": sweep.goal,
        "space": hashlib.sha256(text.encode()).hexdigest()[:16],
    }


def open_study(
    sweep: ResolvedSweep,
    storage: optuna.storages.BaseStorage,
    sampler: optuna.samplers.BaseSampler | None = None,
    pruner: optuna.pruners.BasePruner | None = None,
) -> optuna.Study:
    """The sweep's study, created on first use; refused if it was made for another search."""
    direction = "minimize" if sweep.goal == "minimize" else "maximize"
    study = optuna.create_study(
        study_name=sweep.name,
        storage=storage,
        sampler=sampler,
        pruner=pruner,
        direction=direction,
        load_if_exists=True,
    )
    want = identity(sweep)
    have = {k: study.user_attrs.get(k) for k in want}
    if all(v is None for v in have.values()):
        for k, v in want.items():
            study.set_user_attr(k, v)
        study.set_user_attr("file", sweep.file)
    elif have != want:
        changed = ", ".join(k for k in want if have[k] != want[k])
        raise UsageError(
            f"the study `{sweep.name}` in this storage was made for another search "
            f"(its {changed} differ from the sweep's now)",
            span=sweep.span,
            code="sweep-changed",
            hint="give the changed sweep a new name, or run it with another --dir / --storage; "
            "the trials so far stay in the old study",
        )
    return study


def load_study(name: str, storage: optuna.storages.BaseStorage) -> optuna.Study:
    """An existing study, for `seqc sweep show`."""
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        raise FileError(
            f"no sweep `{name}` in this storage"
            + (f" (it has {', '.join(sorted(names))})" if names else " (it has none)"),
            code="sweep-missing",
            hint="check the sweep's name, or run it first with `seqc sweep FILE -s SWEEP`",
        ) from None


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    return sorted(s.study_name for s in optuna.get_all_study_summaries(storage))


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def redacted(url: str) -> str:
    """`url` with its password hidden: URLs are printed in errors and logs."""
    scheme, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user = creds.partition(":")[0]
    return f"{scheme}{sep}{user}:***@{host}"
