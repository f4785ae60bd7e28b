"""Hyperparameter sweeps on Optuna: a `sweep` declaration's trials, each a real `seqc train`
process in its own run directory, driven by Optuna's samplers and pruners over Optuna's
storages (a journal file by default, any database URL Optuna takes to scale out).

`study` opens the study and its engine parts, `trial` runs one trial's process and reports its
dev metric, `worker` is the loop one worker runs, `lost` finds the trials of workers that died,
`driver` runs several workers and stops them, `report` is what `seqc sweep show` prints and
draws.
"""
