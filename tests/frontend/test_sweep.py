"""A `sweep` resolved and checked: what it gives the runner, and every error it can raise.

Why: a sweep's mistakes (a path that names nothing, a range its param refuses, a metric no run
reports) must surface at `seqc check`, at the line and column that made them, not as a trial
that crashes an hour into a search. The error table reads like `test_errors.py`'s: each case is
a sweep appended to one small program, with the code, the position (counted by hand) and the
did-you-mean the user must get. Then: the values `trial_overrides` writes resolve back to the
values sampled, of every type, and `check_trial` refuses a trial that breaks a rule between
params (`d % heads`), which the space's own check leaves to each trial.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from seqc.compiler.check import check_program
from seqc.compiler.sweep_trials import check_trial
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.resolve.sweep import Component, ResolvedSweep, resolve_sweep, trial_overrides
from seqc.spec.errors import SeqcError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "lm" / "shakespeare.seq"

# Lines 1-11. `lm` lists perplexity and accuracy, `mt` bleu; `e` trains lm alone, `two` both.
# A sweep appended to BASE starts on line 12, its body on lines 13, 14, ...
BASE = """\
seqc 1
input data { train = text("t.txt"); dev = text("d.txt"); tokenizer = chars() }
model M(vocab: int, d: int = 64, heads: int = 4, layers: int = 2, dropout: float = 0.1) {
  drop = Dropout(dropout)
  blocks = repeat(layers) SelfAttention(d, heads)
  forward (x: float32[B, T, d]) -> float32[B, T, d] { return blocks(drop(x)) }
}
task lm { input = data; model = M(vocab = input.vocab_size); metrics = [perplexity, accuracy] }
task mt { input = data; model = M(vocab = input.vocab_size); metrics = [bleu] }
experiment e { tasks = [lm] }
experiment two { tasks = [lm, mt]; train.dev_translations = 0 }
"""


def program_of(tmp_path: Path, sweeps: str, base: str = BASE) -> Any:
    path = tmp_path / "main.seq"
    path.write_text(base + textwrap.dedent(sweeps))
    return load_program(path)


def sweep(body: str, head: str = "sweep s {", **fields: str) -> str:
    """A sweep over `e` with a valid metric and space unless `fields` or `body` say otherwise;
    `body`'s lines come first (line 13 on), then the fields, in this order, each line
    indented two spaces (a space block's lines too: its paths start at column 3)."""
    defaults = {
        "experiment": "experiment = e",
        "metric": "metric = dev.perplexity",
        "space": "space { lm.model.layers = choice([1, 2]) }",
    }
    defaults.update(fields)
    lines = [line for text in (body, *defaults.values()) for line in text.splitlines()]
    return "\n".join([head, *("  " + line for line in lines if line), "}\n"])


class Case(NamedTuple):
    text: str  # the sweep, appended to BASE (line 12 on)
    code: str
    line: int
    col: int
    suggestion: str | None = None
    says: str | None = None


def case(id: str, text: str, code: str, line: int, col: int, **kw: Any) -> Any:
    return pytest.param(Case(text, code, line, col, **kw), id=id)


# fmt: off
CASES = [
    # the declaration's fields
    case("unknown-field", sweep("metrc = dev.loss", metric=""), "unknown-field", 13, 3,
         suggestion="metric"),
    case("space-path-as-field", sweep("lm.model.d = 3"), "unknown-field", 13, 3,
         says="the values a trial varies go in `space { }`"),
    case("duplicate-field", sweep("trials = 2\ntrials = 3"), "duplicate-field", 14, 3),
    case("space-not-a-block", sweep("", space="space = 3"), "wrong-form", 15, 3),
    case("missing-experiment", sweep("", experiment=""), "missing-experiment", 12, 1),
    case("missing-metric", sweep("", metric=""), "missing-metric", 12, 1),
    case("missing-space", sweep("", space=""), "missing-space", 12, 1),
    case("empty-space", sweep("", space="space { }"), "missing-space", 15, 3),
    case("unknown-experiment", sweep("", experiment="experiment = tow"), "unknown-experiment",
         13, 16, suggestion="two"),
    case("experiment-not-a-name", sweep("", experiment="experiment = 3"), "wrong-type", 13, 16),
    case("sweep-named-as-experiment", sweep("", head="sweep e {"), "duplicate-name", 12, 1,
         says="the experiment is declared here"),
    # the metric
    case("test-metric", sweep("", metric="metric = test.perplexity"), "test-metric", 14, 12,
         suggestion="dev.perplexity", says="optimistic estimate"),
    case("train-metric", sweep("", metric="metric = train.loss"), "bad-metric", 14, 12),
    case("metric-without-split", sweep("", metric="metric = perplexity"), "bad-metric", 14, 12),
    case("metric-of-which-task", sweep("", experiment="experiment = two"), "metric-task", 14, 12,
         suggestion="lm.dev.perplexity"),
    case("metric-of-no-task", sweep("", experiment="experiment = two",
         metric="metric = ml.dev.loss"), "unknown-task", 14, 12, suggestion="lm"),
    case("misspelt-metric", sweep("", metric="metric = dev.perplexty"), "unknown-metric", 14, 12,
         suggestion="perplexity"),
    case("metric-not-listed", sweep("", metric="metric = dev.wer"), "unknown-metric", 14, 12,
         says="when its `metrics` list them"),
    case("bleu-without-translations", sweep("", experiment="experiment = two",
         metric="metric = mt.dev.bleu"), "metric-off", 14, 12, says="train.dev_translations"),
    case("misspelt-goal", sweep("goal = maximise"), "bad-goal", 13, 10, suggestion="maximize"),
    case("goal-against-the-metric", sweep("goal = maximize"), "bad-goal", 13, 10,
         suggestion="minimize", says="would search for the worst"),
    case("no-trials", sweep("trials = 0"), "bad-trials", 13, 12),
    # the space
    case("unknown-path", sweep("", space="space { lm.model.head = choice([2]) }"),
         "unknown-path", 15, 11, suggestion="lm.model.heads"),
    case("not-a-distribution", sweep("", space="space { lm.model.d = 64 }"),
         "not-a-distribution", 15, 24),
    case("misspelt-distribution", sweep("", space="space { lm.model.d = unifrom(1, 2) }"),
         "not-a-distribution", 15, 24, suggestion="uniform"),
    case("loguniform-over-an-int", sweep("", space="space { lm.model.d = loguniform(32, 128) }"),
         "space-wrong-type", 15, 24, suggestion="logintrange(32, 128)"),
    case("uniform-over-an-int", sweep("", space="space { lm.model.d = uniform(32.0, 128.0) }"),
         "space-wrong-type", 15, 24, suggestion="intrange(32, 128)"),
    case("uniform-over-an-optional-int",
         sweep("", space="space { train.batch_size = uniform(8.0, 64.0) }"),
         "space-wrong-type", 15, 38, says="an int takes intrange or logintrange"),
    case("uniform-over-a-string",
         sweep("", space="space { train.compute_dtype = uniform(0.0, 1.0) }"),
         "space-wrong-type", 15, 33, says="list its values with choice"),
    case("choice-of-the-wrong-type",
         sweep("", space='space { lm.model.layers = choice([1, "two"]) }'),
         "space-wrong-type", 15, 40),
    case("dropout-past-its-range",
         sweep("", space="space { lm.model.dropout = uniform(0.0, 1.5) }"),
         "space-out-of-range", 15, 43, says="[0, 1)"),
    case("choice-outside-an-enum",
         sweep("", space='space { train.compute_dtype = choice(["float32", "float16"]) }'),
         "space-out-of-range", 15, 52),
    case("low-above-high", sweep("", space="space { lm.model.dropout = uniform(0.3, 0.1) }"),
         "bad-distribution", 15, 43),
    case("log-from-zero",
         sweep("", space="space { lm.loss.label_smoothing = loguniform(0.0, 0.1) }"),
         "bad-distribution", 15, 48, says="a log scale has no 0"),
    case("intrange-of-floats", sweep("", space="space { lm.model.layers = intrange(1.5, 4) }"),
         "bad-distribution", 15, 38),
    case("step-short-of-high",
         sweep("", space="space { lm.model.d = intrange(32, 100, step = 32) }"),
         "bad-distribution", 15, 24, suggestion="intrange(32, 96, step = 32)"),
    case("choice-twice", sweep("", space="space { lm.model.layers = choice([2, 2]) }"),
         "duplicate-choice", 15, 40),
    case("empty-choice", sweep("", space="space { lm.model.layers = choice([]) }"),
         "bad-distribution", 15, 36),
    case("misspelt-argument",
         sweep("", space="space { lm.model.dropout = uniform(0.0, 0.2, stp = 0.1) }"),
         "unknown-argument", 15, 48, suggestion="step"),
    case("too-many-arguments",
         sweep("", space="space { lm.model.dropout = loguniform(0.01, 0.2, 3) }"),
         "bad-arguments", 15, 52),
    case("path-twice", sweep("", space="space {\nlm.model.d = intrange(32, 64)\n"
         "lm.model.d = intrange(32, 64)\n}"), "duplicate-field", 17, 3),
    case("path-inside-another", sweep("", space="space {\ntrain.optimizer.lr = uniform(0.1, 0.2)\n"
         "train.optimizer = choice([adam, sgd])\n}"), "space-overlap", 17, 3),
    # the sampler and the pruner
    case("misspelt-sampler", sweep("sampler = tpr(seed = 0)"), "unknown-sampler", 13, 13,
         suggestion="tpe"),
    case("misspelt-pruner", sweep("pruner = asah"), "unknown-pruner", 13, 12, suggestion="asha"),
    case("misspelt-sampler-argument", sweep("sampler = tpe(sed = 1)"), "unknown-argument", 13, 17,
         suggestion="seed"),
    case("asha-reduction-of-one", sweep("pruner = asha(reduction = 1)"), "bad-argument", 13, 29,
         says="at least 2"),
    case("grid-over-a-float", sweep("sampler = grid", space="space {\n"
         "lm.model.layers = choice([1, 2])\nlm.model.dropout = uniform(0.0, 0.2)\n}"),
         "grid-infinite", 18, 22, says="the grid sampler is chosen here"),
]
# fmt: on


@pytest.mark.parametrize("case", CASES)
def test_error(case: Case, tmp_path: Path) -> None:
    with pytest.raises(SeqcError) as info:
        check_program(program_of(tmp_path, case.text))
    err = info.value
    rendered = err.render()
    assert err.code == case.code, rendered
    assert err.span is not None, rendered
    assert (Path(err.span.file).name, err.span.line, err.span.col) == (
        "main.seq",
        case.line,
        case.col,
    ), rendered
    assert rendered.startswith(f"{err.span}: ")
    assert err.suggestion == case.suggestion, rendered
    if case.says is not None:
        assert case.says in rendered
    lines = rendered.splitlines()
    caret = next(line for line in lines if line.rstrip().endswith("^"))
    source = lines[lines.index(caret) - 1]
    assert caret.index("^") - (source.index("| ") + 2) == case.col - 1, rendered


def test_an_unknown_sweep_names_the_known_ones(tmp_path: Path) -> None:
    program = program_of(tmp_path, sweep("", head="sweep lm.depth {"))
    with pytest.raises(SeqcError) as info:
        resolve_sweep(program, "lm.dpeth")
    assert info.value.code == "unknown-sweep" and info.value.suggestion == "lm.depth"


# ------------------------------------------------------------------------------------ resolved


def test_the_example_sweep_resolves_to_what_it_says() -> None:
    s = resolve_sweep(load_program(EXAMPLE), "lm.shakespeare.lr")
    assert isinstance(s, ResolvedSweep)
    assert (s.experiment, s.goal, s.trials) == ("lm.shakespeare.quick", "minimize", 16)
    assert (s.metric.task, s.metric.split, s.metric.name) == (None, "dev", "perplexity")
    assert s.file.endswith("examples/lm/shakespeare.seq") and s.span is not None
    assert [(d.path, d.kind) for d in s.space] == [
        ("train.optimizer.lr.peak", "loguniform"),
        ("lm.model.dropout", "uniform"),
        ("lm.model.layers", "choice"),
    ]
    lr, dropout, layers = s.space
    assert (lr.low, lr.high) == (1e-4, 1e-2)
    assert (dropout.low, dropout.high, dropout.step) == (0.0, 0.3, None)
    assert layers.choices == (2, 3, 4) and layers.span is not None
    assert s.sampler == Component(kind="tpe", args={"seed": 0})
    assert s.pruner == Component(kind="asha", args={"min_steps": 100, "reduction": 3})


def test_defaults_follow_the_metric(tmp_path: Path) -> None:
    program = program_of(
        tmp_path,
        sweep("", head="sweep a {", metric="metric = dev.accuracy")
        + sweep("", head="sweep b {", metric="metric = lm.dev.loss")
        + sweep("", head="sweep c {", experiment="experiment = two", metric="metric = lm.dev.nll"),
    )
    a, b, c = (resolve_sweep(program, n) for n in "abc")
    assert (a.goal, a.trials, a.sampler.describe(), a.pruner.describe()) == (
        "maximize",
        20,
        "tpe(seed = 0)",
        "none",
    )
    assert b.goal == "minimize" and b.metric.task is None  # one task: its records carry none
    assert c.metric.task == "lm" and c.metric.text == "lm.dev.nll"


def test_bleu_is_a_metric_once_the_run_decodes_dev_translations(tmp_path: Path) -> None:
    base = BASE.replace("train.dev_translations = 0", "train.dev_translations = 10")
    text = sweep("", experiment="experiment = two", metric="metric = mt.dev.chrf")
    s = resolve_sweep(program_of(tmp_path, text, base), "s")
    assert (s.metric.task, s.metric.name, s.goal) == ("mt", "chrf", "maximize")


def test_a_rule_between_params_is_left_to_each_trial(tmp_path: Path) -> None:
    """heads = 3 breaks `d % heads == 0` with the base's d = 64, but a trial may sample d too:
    the space checks clean, and the trial that breaks the rule is refused by `check_trial`."""
    space = "space {\nlm.model.heads = choice([2, 3, 4])\nlm.model.d = choice([48, 64])\n}"
    program = program_of(tmp_path, sweep("", space=space))
    check_program(program)
    s = resolve_sweep(program, "s")
    ok = check_trial(program, s, {"lm.model.heads": 3, "lm.model.d": 48})
    assert (ok.get("lm.model.heads"), ok.get("lm.model.d")) == (3, 48)
    with pytest.raises(SeqcError) as info:
        check_trial(program, s, {"lm.model.heads": 3, "lm.model.d": 64})
    assert info.value.code == "bad-relation"
    assert "d % heads == 0" in info.value.render()


SPACE = """space {
lm.loss.label_smoothing = uniform(0.0, 0.2)
train.optimizer.lr = loguniform(1e-5, 1e-1)
train.steps = intrange(100, 400, step = 100)
lm.model.d = logintrange(32, 128)
lm.model.layers = choice([1, 2, 3])
lm.model.dropout = choice([0.0, 0.25])
train.compute_dtype = choice(["float32", "bfloat16"])
distribution.placement = choice([single, m_etf])
train.optimizer.lazy_rows = choice([true, false])
}"""

TRIALS = [
    {
        "lm.loss.label_smoothing": 0.123456789,
        "train.optimizer.lr": 0.00123,
        "train.steps": 300,
        "lm.model.d": 64,
        "lm.model.layers": 3,
        "lm.model.dropout": 0.25,
        "train.compute_dtype": "bfloat16",
        "distribution.placement": "m_etf",
        "train.optimizer.lazy_rows": True,
    },
    {
        "lm.loss.label_smoothing": 1e-7,
        "train.optimizer.lr": 3.0000000000000004e-05,
        "train.steps": 100,
        "lm.model.d": 32,
        "lm.model.layers": 1,
        "lm.model.dropout": 0.0,
        "train.compute_dtype": "float32",
        "distribution.placement": "single",
        "train.optimizer.lazy_rows": False,
    },
]


@pytest.mark.parametrize("values", TRIALS)
def test_trial_overrides_resolve_back_to_the_sampled_values(tmp_path: Path, values) -> None:
    program = program_of(tmp_path, sweep("", space=SPACE))
    s = resolve_sweep(program, "s")
    overrides = trial_overrides(s, values)
    assert [o.split("=", 1)[0] for o in overrides] == [d.path for d in s.space]
    r = resolve(program, "e", overrides)
    for path, value in values.items():
        got = r.get(path)
        if path == "distribution.placement":  # a name is a call with its defaults
            assert got.kind == value
        else:
            assert got == value and type(got) is type(value), (path, got, value)


def test_trial_overrides_write_calls_strings_and_bools_as_spec_text(tmp_path: Path) -> None:
    space = "space {\ntrain.optimizer = choice([adam(lr = 1e-3), sgd(lr = 0.1)])\n}"
    s = resolve_sweep(program_of(tmp_path, sweep("", space=space)), "s")
    [dim] = s.space
    assert dim.choices == ("adam(lr = 1e-3)", "sgd(lr = 0.1)")
    assert trial_overrides(s, {"train.optimizer": "sgd(lr = 0.1)"}) == [
        "train.optimizer=sgd(lr = 0.1)"
    ]
    strings = resolve_sweep(program_of(tmp_path, sweep("", space=SPACE)), "s")
    written = dict(o.split("=", 1) for o in trial_overrides(strings, TRIALS[0]))
    assert written["train.compute_dtype"] == '"bfloat16"'
    assert written["train.optimizer.lazy_rows"] == "true"
    assert written["lm.loss.label_smoothing"] == "0.123456789"


def test_trial_overrides_refuse_values_the_space_does_not_hold(tmp_path: Path) -> None:
    s = resolve_sweep(program_of(tmp_path, sweep("")), "s")
    with pytest.raises(ValueError, match="not one of"):
        trial_overrides(s, {"lm.model.layers": 5})
    with pytest.raises(ValueError, match="not one of"):
        trial_overrides(s, {"lm.model.layers": True})  # `true` is not `1`
    with pytest.raises(KeyError):
        trial_overrides(s, {})


def test_the_language_reference_sweep_checks_over_the_example(tmp_path: Path) -> None:
    """The reference's sweep is written over `examples/lm/shakespeare.seq`: it must check."""
    text = (ROOT / "docs" / "reference" / "language.md").read_text(encoding="utf-8")
    section = text.split("## Sweeps", 1)[1]
    [snippet] = re.findall(r"```seq\n(sweep .*?)```", section, re.S)[:1]
    path = tmp_path / "doc.seq"
    path.write_text(f'seqc 1\nimport "{EXAMPLE}"\n{snippet}')
    program = load_program(path)
    check_program(program)
    s = resolve_sweep(program, "lm.shakespeare.depth")
    assert s.experiment == "lm.shakespeare.quick" and len(s.space) == 3
