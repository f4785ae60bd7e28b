"""`seqc check` refuses what `seqc train` refuses on the spec alone, at the same place.

Why: a spec that `check` (or the editor) passes and `train` then refuses, after reading the
data, is a check that lies. Each case below is a small spec that a training run refuses for a
reason the spec states (its mix, its mesh against the devices it lists, a sharding plan that
does not fit, what is not implemented yet): `check_program` (what `seqc check` and the language
server run) must refuse it with the run's code, at the value that asked for it (the spec line,
or the `--set` on the command line), with a note at the other side of a conflict and a hint
that names the setting that fixes it. Then the run's own check must raise the very same error
(one implementation, called from both).

The rest: `show --sharding` refuses as the run does; `show --graph --passes` prints the passes
of each task of a multi-task model; a stale profile says what differs and how to remake it with
the user's `--set`s; the check's verdict cache never hides one of these refusals.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import pytest
from typer.testing import CliRunner

from seqc.backends.api import Cluster
from seqc.cli import app
from seqc.compiler.check import check_program
from seqc.compiler.check_cache import check_file, lookup
from seqc.compiler.compile import compile_task
from seqc.compiler.sharding import check_batches, plan_sharding
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.run.devices.profile import OpTiming, profile_command, read_profile, write_profile
from seqc.run.train.checks import check_strategy
from seqc.run.train.mix import Mix
from seqc.spec.errors import SeqcError

# Lines 1-9; the experiment `e` starts on line 10, its body's lines are 11, 12, ...
BASE = """\
seqc 1
input data { train = text("t.txt"); tokenizer = chars(); buckets = {32: 8} }
model M(vocab: int, d: int = 8) {
  embed = Embedding(vocab, d)
  out = Softmax(vocab, d)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] { return out(embed(ids)) }
}
task a { input = data; model = M(vocab = 16) }
task b { input = data; model = M(vocab = 16) }
"""
CMD = "<command line>"
ONE = "tasks = [a]"
TWO = "tasks = [a, b]"
DEVICES = "distribution.devices = 2 x cpu()"
PLACED = "distribution.placement = m_etf"


class Case(NamedTuple):
    body: tuple[str, ...]  # the lines of experiment `e`
    code: str
    at: tuple[str, int, str]  # (file, line, the text the caret starts at)
    note: tuple[str, int] | None = None  # (file, line) of the first note
    says: tuple[str, ...] = ()  # phrases the rendered error holds
    not_says: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    refused_by: str = "run"  # the run's check that raises it: "run", "plan" or "batches"
    suggestion: str | None = None


def case(id: str, body: list[str], code: str, at: tuple[str, int, str], **kw: object):
    return pytest.param(Case(tuple(body), code, at, **kw), id=id)  # type: ignore[arg-type]


# fmt: off
CASES = [
    # -- the mix of a multi-task experiment (seqc.run.train.mix)
    case("mix-unknown-task", [TWO, "train.mix = {a: 1, c: 1}"], "unknown-task",
         ("main.seq", 12, "train.mix"), says=("names `c`",)),
    case("mix-zero", [TWO, "train.mix = {a: 0, b: 0}"], "mix-zero",
         ("main.seq", 12, "train.mix")),
    case("mix-zero-by-task-weight", [TWO, "a.weight = 0"], "mix-zero",
         ("main.seq", 12, "a.weight")),
    case("mix-incomplete", [TWO, "train.mix = {a: 1}"], "mix-incomplete",
         ("main.seq", 12, "train.mix")),
    case("lr-scale-with-sum", [TWO, 'train.mix_by = "sum"', "train.lr_scale = {a: 0.5}"],
         "lr-scale-with-sum", ("main.seq", 13, "train.lr_scale"), note=("main.seq", 12)),
    case("set-lr-scale-with-sum", [TWO, 'train.mix_by = "sum"'], "lr-scale-with-sum",
         (CMD, 1, "train.lr_scale"), note=("main.seq", 12), overrides=("train.lr_scale={b: 2}",)),
    # -- the mesh against the devices listed, and the sharding plan (seqc.compiler.sharding)
    case("mesh-larger-than-devices", [ONE, "distribution.mesh = {data: 4}", DEVICES],
         "mesh-devices", ("main.seq", 12, "distribution.mesh"), note=("main.seq", 13),
         says=("needs 4 devices", "lists 2")),
    case("set-mesh-larger-than-devices", [ONE, DEVICES], "mesh-devices",
         (CMD, 1, "distribution.mesh"), note=("main.seq", 12),
         overrides=("distribution.mesh={data: 4}",)),
    case("params-over-device-memory",
         [ONE, "distribution.mesh = {model: 2}", 'distribution.devices = 2 x cpu(memory = "1KiB")'],
         "device-memory", ("main.seq", 13, "distribution.devices"), note=("main.seq", 12),
         says=("2.12 KiB", "(212% of the 1.00 KiB", "fsdp or model axis"), refused_by="plan"),
    case("unused-shard-rule", [ONE, "distribution.mesh = {data: 2}",
                               'distribution.shard = {"blocks.*": [none, none]}'],
         "unused-shard-rule", ("main.seq", 13, "distribution.shard"), refused_by="plan",
         says=("--set distribution.shard={}",)),
    case("set-unused-shard-rule", [ONE, "distribution.mesh = {data: 2}"], "unused-shard-rule",
         (CMD, 1, "distribution.shard"), refused_by="plan", suggestion="embed.table",
         overrides=('distribution.shard={"embed.tabel": [none, none]}',)),
    case("shard-not-divisible", [ONE, "distribution.mesh = {model: 3}"], "shard-not-divisible",
         ("main.seq", 4, "embed = "), refused_by="plan", says=("(16) is not divided",)),
    case("batch-not-divisible", [ONE, "distribution.mesh = {data: 3}"], "batch-not-divisible",
         ("main.seq", 2, "buckets"), refused_by="batches"),
    # -- lazy rows (not implemented beyond one device and one batch per update)
    case("lazy-rows-placed", [ONE, "train.optimizer.lazy_rows = true", DEVICES, PLACED],
         "not-implemented", ("main.seq", 12, "train.optimizer.lazy_rows"), note=("main.seq", 14),
         says=("`placement = m_etf`", "hint: set distribution.placement = single"),
         not_says=("train on one device",)),
    case("set-lazy-rows-placed", [ONE, DEVICES, PLACED], "not-implemented",
         (CMD, 1, "train.optimizer.lazy_rows"), note=("main.seq", 13),
         overrides=("train.optimizer.lazy_rows=true",)),
    case("lazy-rows-accumulate", [ONE, "train.optimizer = adam(lazy_rows = true)",
                                  "train.accumulate = 2"],
         "not-implemented", ("main.seq", 12, "train.optimizer"), note=("main.seq", 13),
         says=("hint: set train.accumulate = 1",), not_says=("one device,", "train on one")),
    case("lazy-rows-mesh", [ONE, "train.optimizer.lazy_rows = true",
                            "distribution.mesh = {data: 2}"],
         "not-implemented", ("main.seq", 12, "train.optimizer.lazy_rows"), note=("main.seq", 13),
         says=("a mesh of devices", "hint: set distribution.mesh = {data: 1}")),
    # -- a multi-task model (one device of one process)
    case("multitask-mesh", [TWO, "distribution.mesh = {data: 2}"], "not-implemented",
         ("main.seq", 12, "distribution.mesh"), says=("hint: set distribution.mesh = {data: 1}",)),
    case("set-multitask-mesh", [TWO], "not-implemented", (CMD, 1, "distribution.mesh"),
         overrides=("distribution.mesh={fsdp: 2}",)),
    case("multitask-placed", [TWO, DEVICES, PLACED], "not-implemented",
         ("main.seq", 13, "distribution.placement"),
         says=("hint: set distribution.placement = single",)),
    case("multitask-sum-lazy-rows", [TWO, 'train.mix_by = "sum"',
                                     "train.optimizer.lazy_rows = true"],
         "not-implemented", ("main.seq", 13, "train.optimizer.lazy_rows"), note=("main.seq", 12),
         says=("hint: set lazy_rows = false",)),
    # -- asynchronous training places no ops
    case("async-placed", [ONE, 'distribution.sync = "async"', DEVICES, PLACED], "cannot-place",
         ("main.seq", 14, "distribution.placement"), note=("main.seq", 12)),
]
# fmt: on


def spec_text(body: tuple[str, ...]) -> str:
    return BASE + "experiment e {\n" + "".join(f"  {line}\n" for line in body) + "}\n"


def write(folder: Path, body: tuple[str, ...]) -> Path:
    (folder / "seqc.toml").write_text("")
    path = folder / "main.seq"
    path.write_text(spec_text(body))
    return path


def expected_col(c: Case) -> int:
    """The column of `c.at`'s text on its line (of the spec, or of the `--set`s)."""
    file, line, text = c.at
    if file == CMD:
        source = f"--set {c.overrides[line - 1]}"
    else:
        source = spec_text(c.body).splitlines()[line - 1]
    assert text in source, (text, source)
    return source.index(text) + 1


def check_error(c: Case, folder: Path) -> SeqcError:
    with pytest.raises(SeqcError) as info:
        check_program(load_program(write(folder, c.body)), "e", list(c.overrides))
    return info.value


def where(err: SeqcError) -> tuple[str, int, int]:
    assert err.span is not None, err.render()
    file = err.span.file if err.span.file.startswith("<") else Path(err.span.file).name
    return file, err.span.line, err.span.col


@pytest.mark.parametrize("c", CASES)
def test_check_refuses_at_the_value_that_asked(c: Case, tmp_path: Path) -> None:
    err = check_error(c, tmp_path)
    rendered = err.render()
    assert err.code == c.code, rendered
    assert where(err) == (c.at[0], c.at[1], expected_col(c)), rendered
    assert f"{c.at[0]}:{c.at[1]}:{expected_col(c)}: check error [{c.code}]" in rendered
    if c.note is None:
        assert not err.notes, rendered
    else:
        span = err.notes[0].span
        file = span.file if span.file.startswith("<") else Path(span.file).name
        assert (file, span.line) == c.note, rendered
    for phrase in c.says:
        assert phrase in rendered, rendered
    for phrase in c.not_says:
        assert phrase not in rendered, rendered
    assert err.hint, rendered
    assert err.suggestion == c.suggestion, rendered


def _the_run_refuses(c: Case, folder: Path) -> SeqcError:
    """The check the run itself makes, without data or a backend (the values come from the
    spec, as the run's resolution with the data's sizes would give them)."""
    program = load_program(write(folder, c.body))
    resolved = resolve(program, "e", list(c.overrides))
    with pytest.raises(SeqcError) as info:
        if c.refused_by == "run":  # `seqc train` calls this first, then Mix.of and the rest
            engine = SimpleNamespace(trains_async=True, title="TensorFlow")
            servers = any("async" in line for line in c.body)  # an async run has them
            cluster = Cluster(spec={"ps": ["localhost:1"]}) if servers else Cluster()
            check_strategy(resolved, engine, cluster)  # type: ignore[arg-type]
        elif c.refused_by == "plan":  # a run over a mesh plans its graph's sharding
            task = resolved.tasks[0]
            plan_sharding(compile_task(program, resolved, task).graph, resolved, task)
        else:  # and splits its batches (of the pipeline's buckets) over the data axes
            task = resolved.tasks[0]
            plan = plan_sharding(compile_task(program, resolved, task).graph, resolved, task)
            check_batches(plan, [8], resolved.span(f"{task}.input.buckets"))
    return info.value


@pytest.mark.parametrize("c", CASES)
def test_train_refuses_with_the_same_error(c: Case, tmp_path: Path) -> None:
    checked = check_error(c, tmp_path)
    ran = _the_run_refuses(c, tmp_path)
    assert (ran.code, ran.message, ran.hint) == (checked.code, checked.message, checked.hint)
    assert (ran.span, ran.notes) == (checked.span, checked.notes)


@pytest.mark.parametrize("c", [x for x in CASES if x.values[0].at[0] == "main.seq"])
def test_cli_check_prints_the_location(c: Case, tmp_path: Path) -> None:
    path = write(tmp_path, c.body)
    result = CliRunner().invoke(app, ["check", str(path), "-e", "e"])
    assert result.exit_code == 2, result.output
    assert f"main.seq:{c.at[1]}:{expected_col(c)}: check error [{c.code}]" in result.output


def test_the_mix_of_a_run_is_the_checked_mix(tmp_path: Path) -> None:
    """`Mix.of` (what a multi-task run steps by) normalises the weights `check` accepted."""
    path = write(tmp_path, (TWO, "train.mix = {a: 3, b: 1}", 'train.mix_by = "round_robin"'))
    resolved = check_program(load_program(path), "e")[0]
    assert Mix.of(resolved).weights == {"a": 0.75, "b": 0.25}
    bad = write(tmp_path, (TWO, "train.mix = {a: 0, b: 0}"))
    with pytest.raises(SeqcError, match="mix-zero"):
        Mix.of(resolve(load_program(bad), "e"))


def test_the_editor_shows_the_run_checks(tmp_path: Path) -> None:
    """The language server's diagnostics run `check_program`: a run refusal is underlined."""
    from lsprotocol import types
    from pygls.workspace import Workspace

    from seqc.lsp.diagnostics import check

    path = write(tmp_path, (TWO, "train.mix = {a: 0, b: 0}"))
    workspace = Workspace(tmp_path.as_uri())
    uri = path.as_uri()
    text = path.read_text()
    workspace.put_text_document(types.TextDocumentItem(uri, "seq", 1, text))
    (diagnostic,) = check(uri, workspace).diagnostics[uri]
    assert diagnostic.code == "mix-zero"
    assert (diagnostic.range.start.line, diagnostic.range.start.character) == (11, 2)


# ------------------------------------------------------------------ the verdict cache


def test_a_verdict_never_hides_a_run_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A verdict answers only for the same texts (the root and every import) and the same
    `--set`s: a value the run checks read, changed in an imported file or by a `--set`, is
    checked again."""
    monkeypatch.setenv("SEQC_PARSE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "seqc.toml").write_text("")
    lib = tmp_path / "lib.seq"
    lib.write_text(BASE + "experiment base {\n  tasks = [a]\n  " + DEVICES + "\n}\n")
    main = tmp_path / "main.seq"
    main.write_text('seqc 1\nimport "lib.seq"\nexperiment e extends base {\n'
                    "  distribution.mesh = {data: 2}\n}\n")  # fmt: skip
    assert check_file(main, "e").experiments == 1
    assert lookup(main, "e") is not None  # a verdict, which the changes below must not reuse
    with pytest.raises(SeqcError) as info:
        check_file(main, "e", ["train.optimizer.lazy_rows=true"])
    assert info.value.code == "not-implemented"
    lib.write_text(lib.read_text().replace("2 x cpu()", "1 x cpu()"))  # the mesh no longer fits
    with pytest.raises(SeqcError) as info:
        check_file(main, "e")
    assert info.value.code == "mesh-devices" and where(info.value) == ("main.seq", 4, 3)


# ------------------------------------------------------------------ seqc show


def test_show_sharding_refuses_what_the_run_refuses(tmp_path: Path) -> None:
    runner = CliRunner()
    path = write(tmp_path, (ONE, "distribution.mesh = {data: 4}", DEVICES))
    result = runner.invoke(app, ["show", str(path), "-e", "e", "--sharding"])
    assert result.exit_code == 2 and "main.seq:12:3: check error [mesh-devices]" in result.output
    tight = write(tmp_path, (ONE, "distribution.mesh = {model: 2}",
                             'distribution.devices = 2 x cpu(memory = "512B")'))  # fmt: skip
    result = runner.invoke(app, ["show", str(tight), "-e", "e", "--sharding"])
    assert result.exit_code == 2, result.output
    assert "embed.table" in result.output  # the table first: what does not fit is on screen
    assert "(425.0%)" in result.output and "main.seq:13:3: check error [device-memory]" in (
        result.output
    )
    one = write(tmp_path, (ONE, 'distribution.devices = [cpu(memory = "512B")]'))
    result = runner.invoke(app, ["show", str(one), "-e", "e", "--sharding"])
    assert result.exit_code == 0, result.output  # one device is not planned by a run: a warning
    assert "warning:" in result.output and "do not fit the 512 B of one device" in result.output


def test_show_passes_of_each_task_of_a_multitask_model(tmp_path: Path) -> None:
    path = write(tmp_path, (TWO,))
    result = CliRunner().invoke(app, ["show", str(path), "-e", "e", "--graph", "--passes"])
    assert result.exit_code == 0, result.output
    for task in ("a", "b"):
        assert f"{task}.model: passes on the training graph" in result.output
    assert result.output.count("fuse_matmul") == 2
    assert result.output.index("b.model: passes") > result.output.index("b.model: M")


# ------------------------------------------------------------------ stale profiles


def _profile(path: Path, graph, dims: dict[str, int]) -> None:
    rows = [
        OpTiming(op.id, op.kind, op.layer, 1e-6, 1e-6, 1e-6, True, str(op.type), op.inputs)
        for op in graph.ops
    ]
    write_profile(path, rows, graph, dims, {"experiment": "e", "task": "a", "backend": "jax"})


def _graph(folder: Path, *sets: str):
    program = load_program(write(folder, (ONE,)))
    resolved = resolve(program, "e", list(sets))
    return compile_task(program, resolved, "a").graph


def test_a_stale_profile_says_what_differs(tmp_path: Path) -> None:
    profiled, dims = tmp_path / "p.json", {"B": 8, "T": 32, "S": 32}
    _profile(profiled, _graph(tmp_path), dims)
    wider = _graph(tmp_path, "a.model.d=16")
    sets = ["a.model.d=16"]

    def remake(backend: str) -> str:
        return profile_command(tmp_path / "main.seq", "e", profiled, sets, "a", backend)

    with pytest.raises(SeqcError) as info:
        read_profile(profiled, wider, dims, remake)
    err = info.value
    assert err.code == "stale-profile" and err.expected != err.found
    assert "another graph" in err.message and "op 1 is `param` in `embed`" in err.message
    assert "float32[16, 8]" in err.message and "float32[16, 16]" in err.message
    assert "sizes differ" not in err.message  # the same sizes: the graph is what differs
    assert "--set a.model.d=16" in (err.hint or "") and "--task a" in (err.hint or "")
    with pytest.raises(SeqcError) as info:  # the graph as profiled, at other sizes
        read_profile(profiled, _graph(tmp_path), {**dims, "B": 16}, remake)
    assert "other sizes" in info.value.message
    assert (
        info.value.found == f"sizes {dims}" and info.value.expected == f"sizes {dims | {'B': 16}}"
    )


def test_the_remake_command_is_the_placements_own(tmp_path: Path) -> None:
    """`seqc place --set ... --profile F` refuses a profile of the spec without the `--set`s
    with a command that profiles what it places: following the hint makes a fresh profile."""
    path = write(tmp_path, (ONE, DEVICES, PLACED))
    profiled = tmp_path / "p.json"
    program = load_program(path)
    resolved = resolve(program, "e")
    from seqc.compiler.placement.plan import batch_dims

    _profile(profiled, compile_task(program, resolved, "a").graph, batch_dims(resolved, "a"))
    wide = "a.model.d=16"
    buckets = "a.input.buckets={16: 4, 32: 2}"
    args = ["place", str(path), "-e", "e", "--set", wide, "--set", buckets]
    result = CliRunner().invoke(app, [*args, "--profile", str(profiled)], terminal_width=400)
    assert result.exit_code == 2 and "stale-profile" in result.output, result.output
    hint = next(line for line in result.output.splitlines() if "hint:" in line)
    command = shlex.split(hint.split("`")[1])
    assert command[:5] == ["seqc", "profile", str(path), "-e", "e"]
    assert command.count("--set") == 2 and wide in command and buckets in command
    assert command[-2:] == ["--json", str(profiled)]
    assert json.loads(profiled.read_text())["graph"]  # the profile names its graph's signature


def test_seqc_train_refuses_what_the_spec_decides_before_reading_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mix naming no task of the experiment: `train` read (here: looked for) the corpus
    first, and a missing corpus hid the spec's own error."""
    monkeypatch.chdir(tmp_path)  # no prepared corpus here
    spec = Path(__file__).resolve().parents[2] / "examples" / "mt" / "bible_both_ways.seq"
    args = ["train", str(spec), "-e", "mt.bible.both_ways.smoke", "--run-dir", "run"]
    result = CliRunner().invoke(app, [*args, "--set", "train.mix={xx: 1}"])
    assert result.exit_code == 2 and "[unknown-task]" in result.output, result.output
    assert "missing-data" not in result.output and not (tmp_path / "run").exists()
