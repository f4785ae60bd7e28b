"""From parsed files to a resolved experiment: the stage between `spec/` and `compiler/`.

`program.py` loads a root file and its imports into one index of declarations; `layers/` checks
layer declarations and instantiates a model's layer tree; `values.py` evaluates and type-checks
values against the catalogue; `experiment.py` resolves an experiment (`extends`, `--set`
overrides, data symbols) into a frozen `ResolvedExperiment` with provenance, from the statements
it applies (`statements.py`), set at their paths (`setting.py`, `provenance.py`), and its tasks
(`tasks.py`, with `inputs.py` and `models.py`).

Nothing here lowers a model or knows a backend exists; the data layer reads resolved inputs
from here, and the compiler lowers resolved models.
"""
