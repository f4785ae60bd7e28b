"""Multi-task models: shared layers, task mixing, exact resume, parity and per-task commands.

Two language-model tasks read one tiny words corpus (one tokenizer, so they may share the
embedding) and share the embedding and a Transformer block; each keeps its own output layer.
The corpus has 13 words and its tokenizer names `vocab_size = 32`, which is what
`input.vocab_size` reads (the number a tokenizer call names; the fitted tokenizer's size where it
names none): a named 20,000 would make the models a million parameters, nearly all in output rows
that no token reaches (the file took 72 CPU-seconds cold with them, 62 without).
Both backends train them the same way (per-task losses equal to 1e-5 over 10 steps, stepping one
task at a time and stepping the weighted sum); an interrupted run resumes to the same weights as
an uninterrupted one, the mix and each task's pipeline included. One uninterrupted run per
backend, mixed by `sample`, serves the comparison, the resumed runs and the commands; the
Bible example trains by `round_robin`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from seqc.backends.weights import read_weights
from seqc.cli import app
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.run.session import open_multitask, open_training
from seqc.run.train.loop import train
from seqc.run.train.mix import Mix
from seqc.spec.errors import SeqcError

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = ROOT / "examples" / "common" / "transformer.seq"
runner = CliRunner()

SPEC = """seqc 1
import "{blocks}"
input words {{
  train = text("train.txt")
  dev = text("dev.txt")
  tokenizer = words(vocab_size = 32)
  buckets = {{16: 8}}
}}
model LM(vocab: int, d: int = 16) {{
  embed = Embedding(vocab, d)
  pos = SinusoidalPosition(d)
  blocks = repeat(1) CausalBlock(d, 2, dropout = 0.0)
  norm = LayerNorm(d)
  out = Softmax(vocab, d)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {{
    return out(norm(blocks(pos(embed(ids)))))
  }}
}}
task a {{
  input = words
  model = LM(vocab = input.vocab_size)
  decode = greedy(max_length = 6)
}}
task b {{
  input = words
  model = LM(vocab = input.vocab_size, d = {d_b})
  decode = greedy(max_length = 6)
}}
experiment two {{
  tasks = [a, b]
  share {{
    embed = [a.embed, b.embed]
    blocks = [a.blocks, b.blocks]
  }}
  train {{
    optimizer = adam(lr = 1e-2)
    steps = 10
    mix = {{a: 0.6, b: 0.4}}
    mix_by = "{mix_by}"
    log_every = 1
    eval_every = 0
    checkpoint_every = 5
  }}
}}
experiment alone {{
  tasks = [a]
  train {{ optimizer = adam(lr = 1e-2)  steps = 6  log_every = 1  eval_every = 0 }}
}}
"""


def _write(folder: Path, *, mix_by: str = "round_robin", d_b: int = 16, extra: str = "") -> Path:
    rng = random.Random(0)
    words = [
        "the",
        "cat",
        "sat",
        "on",
        "a",
        "mat",
        "and",
        "dog",
        "ran",
        "to",
        "big",
        "red",
        "house",
    ]
    for split, n in (("train", 200), ("dev", 20)):
        lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 8))) for _ in range(n)]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    spec = folder / "two.seq"
    spec.write_text(SPEC.format(blocks=BLOCKS.as_posix(), mix_by=mix_by, d_b=d_b) + extra)
    return spec


def _error(fn: object) -> SeqcError:
    with pytest.raises(SeqcError) as info:
        fn()  # type: ignore[operator]
    return info.value


def _train_losses(history: list[dict]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for h in history:
        out.setdefault(h["task"], []).append(h["loss"])
    return out


# ------------------------------------------------------------------------------ the spec


def test_a_share_of_different_shapes_is_an_error_at_the_use_naming_both_tasks(
    tmp_path: Path,
) -> None:
    spec = _write(tmp_path, d_b=24)
    e = _error(lambda: open_multitask(spec, "two", cache_dir=tmp_path / "c"))
    assert e.code == "share-mismatch"
    text = str(e)
    assert "`a`" in text and "`b`" in text
    assert "[16, 16]" in text or ("16" in text and "24" in text)
    line = next(i for i, x in enumerate(spec.read_text().splitlines(), 1) if "embed = [" in x)
    assert e.span is not None and e.span.line == line
    assert e.span.col == spec.read_text().splitlines()[line - 1].index("b.embed") + 1
    # `seqc check` finds it too, without data, when the spec states every size
    spec.write_text(spec.read_text().replace("vocab = input.vocab_size", "vocab = 20"))
    checked = runner.invoke(app, ["check", str(spec)])
    assert checked.exit_code == 2 and "share-mismatch" in checked.output
    assert "[20, 16] in `a`, [20, 24] in `b`" in checked.output


@pytest.mark.parametrize(
    ("share", "code"),
    [
        ("x = [a.norm, c.norm]", "unknown-task"),
        ("x = [a.norm, b.nrm]", "unknown-layer"),
        ("x = [a.norm]", "bad-share"),
        ("x = [a.norm, a.out]", "bad-share"),
        ("x = [a.norm, b.norm]\n    y = [a.norm, b.out]", "bad-share"),
        ("a = [a.norm, b.norm]", "reserved-name"),
    ],
)
def test_share_errors_point_at_the_share(tmp_path: Path, share: str, code: str) -> None:
    spec = _write(
        tmp_path, extra=f"experiment bad extends two {{\n  share {{\n    {share}\n  }}\n}}\n"
    )
    e = _error(lambda: resolve(load_program(spec), "bad"))
    assert e.code == code, str(e)
    assert e.span is not None and e.span.line > len(SPEC.splitlines())


@pytest.mark.parametrize(
    ("setting", "code"),
    [
        ("train.mix = {a: 1.0, c: 1.0}", "unknown-task"),
        ("train.mix = {a: 1.0}", "mix-incomplete"),
        ("train.mix = {a: 1.0, b: 0.0}", "mix-zero"),
        ('train.mix_by = "sum"\n  train.lr_scale = {b: 0.5}', "lr-scale-with-sum"),
        ("train.lr_scale = {z: 0.5}", "unknown-task"),
    ],
)
def test_mix_errors_point_at_the_train_block(tmp_path: Path, setting: str, code: str) -> None:
    spec = _write(tmp_path, extra=f"experiment bad extends two {{\n  {setting}\n}}\n")
    e = _error(lambda: Mix.of(resolve(load_program(spec), "bad")))
    assert e.code == code, str(e)
    assert e.span is not None and e.span.line > len(SPEC.splitlines())


# ------------------------------------------------------------------------------ the mix


def _mix(by: str, weights: dict[str, float]) -> Mix:
    total = sum(weights.values())
    return Mix(
        tasks=tuple(weights),
        weights={t: w / total for t, w in weights.items()},
        by=by,
        seed=3,
        lr_scale=dict.fromkeys(weights, 1.0),
    )


def _take(mix: Mix, start: int, n: int) -> list[tuple[str, ...]]:
    out = []
    for picks in mix.schedule(start):
        out.append(picks)
        if len(out) == n:
            return out
    return out


def test_round_robin_interleaves_in_proportion() -> None:
    mix = _mix("round_robin", {"a": 2.0, "b": 1.0})
    assert [p[0] for p in _take(mix, 0, 6)] == ["a", "b", "a", "a", "b", "a"]
    even = _mix("round_robin", {"a": 1.0, "b": 1.0, "c": 1.0})
    assert [p[0] for p in _take(even, 0, 6)] == ["a", "b", "c", "a", "b", "c"]


@pytest.mark.parametrize("by", ["sample", "round_robin", "sum"])
def test_the_mix_is_a_function_of_the_step(by: str) -> None:
    mix = _mix(by, {"a": 0.7, "b": 0.3})
    whole = _take(mix, 0, 400)
    assert _take(mix, 123, 277) == whole[123:]  # a resumed run continues the same sequence
    counts = mix.positions(400)
    assert counts == {t: sum(t in p for p in whole) for t in ("a", "b")}
    if by == "sum":
        assert counts == {"a": 400, "b": 400}
    else:
        assert abs(counts["a"] / 400 - 0.7) < 0.06


# ------------------------------------------------------------------------------ training


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """`two` trained by `seqc train` on JAX, uninterrupted for its 10 steps, one task a step
    drawn by the `sample` mix: the spec and the run. The TF run beside it, the resumed runs
    and the commands below all compare with or read this one."""
    folder = tmp_path_factory.mktemp("mt")
    spec = _write(folder, mix_by="sample")
    run = folder / "run"
    result = runner.invoke(
        app,
        ["train", str(spec), "-e", "two", "--run-dir", str(run), "--cache-dir", str(folder / "c")],
    )
    assert result.exit_code == 0, result.output
    assert "a: dev perplexity after 10 steps" in result.output
    assert "b sample:" in result.output
    return spec, run


@pytest.fixture(scope="module")
def tf_trained(trained: tuple[Path, Path]) -> Path:
    """The same 10 steps on TF, by `train`: its run."""
    spec, _ = trained
    run = spec.parent / "tf"
    session = open_training(spec, "two", cache_dir=spec.parent / "c")
    train(session, run, progress=False, backend="tf")
    return run


def _straight(trained: tuple[Path, Path], tf_trained: Path, backend: str) -> Path:
    """The uninterrupted run of `backend`."""
    return trained[1] if backend == "jax" else tf_trained


def _curve(run: Path) -> list[dict]:
    """The run's training records (metrics.jsonl): one per step and task trained."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["split"] == "train"]


def _assert_backends_alike(
    losses: dict[str, dict[str, list[float]]], params: dict[str, dict[str, np.ndarray]]
) -> None:
    """Per-task losses equal to 1e-5 at every step, and the weights after 10 steps alike."""
    for t in ("a", "b"):
        np.testing.assert_allclose(losses["jax"][t], losses["tf"][t], rtol=1e-5, atol=1e-5)
    assert set(params["jax"]) == set(params["tf"])
    for name, value in params["jax"].items():
        if name.endswith(".attn.k.b"):
            # A key bias adds the same q.b to every score of a query, which softmax ignores: its
            # gradient is rounding noise, and Adam turns noise into steps of about lr. Its value
            # is noise on either backend (the order of a fused q/k/v product's sums decides
            # which), bounded by the steps taken.
            for v in (value, params["tf"][name]):
                assert np.abs(v).max() <= 10 * 1e-2 * 1.01, name
            continue
        # A quarter of one Adam step (lr 1e-2): a step is about lr whatever the gradient's
        # size, so an element whose gradient is near rounding noise may take part of a step
        # differently on either backend (1.1e-3 on one element of blocks.0.attn.k.w, on an AMD
        # EPYC with AVX2 only); a wrong gradient differs by whole steps.
        np.testing.assert_allclose(value, params["tf"][name], atol=2.5e-3, err_msg=name)


def test_jax_and_tf_train_a_two_task_model_alike_one_task_a_step(
    trained: tuple[Path, Path], tf_trained: Path
) -> None:
    """Both backends step the task the mix draws each step, in the mix's order."""
    spec, run = trained
    order = [p[0] for p in _take(Mix.of(resolve(load_program(spec), "two")), 0, 10)]
    assert set(order) == {"a", "b"}  # measured: a a b a a a a b a b
    losses, params = {}, {}
    for backend, folder in (("jax", run), ("tf", tf_trained)):
        curve = _curve(folder)
        assert [(r["step"], r["task"]) for r in curve] == list(enumerate(order, 1)), backend
        losses[backend] = _train_losses(curve)
        weights = read_weights(folder)
        assert (weights.backend, weights.step) == (backend, 10)
        params[backend] = weights.params
    _assert_backends_alike(losses, params)
    info = json.loads((run / "run.json").read_text())
    assert info["mix"]["by"] == "sample" and set(info["tasks"]) == {"a", "b"}
    assert info["shared"]["embed.table"] == ["a", "b"]


def test_jax_and_tf_train_a_two_task_model_alike_on_the_weighted_sum(tmp_path: Path) -> None:
    """Both backends step every task each step, on the weighted sum of their losses."""
    spec = _write(tmp_path, mix_by="sum")
    cache = tmp_path / "c"
    runs = {}
    for backend in ("jax", "tf"):
        joint = open_training(spec, "two", cache_dir=cache)
        runs[backend] = train(joint, tmp_path / backend, progress=False, backend=backend)
    losses = {b: _train_losses(runs[b].history) for b in ("jax", "tf")}
    assert len(losses["jax"]["a"]) == len(losses["jax"]["b"]) == 10
    params = {
        b: {k: np.asarray(v) for k, v in runs[b].state["params"].items()} for b in ("jax", "tf")
    }
    _assert_backends_alike(losses, params)
    info = json.loads((tmp_path / "jax" / "run.json").read_text())
    assert info["mix"]["by"] == "sum" and set(info["tasks"]) == {"a", "b"}
    assert info["shared"]["embed.table"] == ["a", "b"]


@pytest.mark.parametrize("backend", ["jax", "tf"])
def test_a_multi_task_run_resumes_exactly(
    trained: tuple[Path, Path], tf_trained: Path, tmp_path: Path, backend: str
) -> None:
    """5 steps, then resumed to 10: the weights and the curve of the uninterrupted run."""
    spec, _ = trained
    straight = _straight(trained, tf_trained, backend)
    cache = spec.parent / "c"
    half = open_training(spec, "two", ["train.steps=5"], cache_dir=cache)
    train(half, tmp_path / "r", progress=False, backend=backend)
    resumed = train(
        open_training(spec, "two", cache_dir=cache),
        tmp_path / "r",
        resume=True,
        progress=False,
        backend=backend,
    )
    for name, value in read_weights(straight).params.items():
        np.testing.assert_array_equal(
            value, np.asarray(resumed.state["params"][name]), err_msg=name
        )
    resumed_curve = [(r["step"], r["task"], r["loss"]) for r in _curve(tmp_path / "r")]
    straight_curve = [(r["step"], r["task"], r["loss"]) for r in _curve(straight)]
    assert [c[:2] for c in resumed_curve] == [c[:2] for c in straight_curve]
    np.testing.assert_allclose([c[2] for c in resumed_curve], [c[2] for c in straight_curve])


def test_shared_weights_are_one_tensor_that_each_task_updates(tmp_path: Path) -> None:
    spec = _write(tmp_path)
    joint = open_multitask(spec, "two", cache_dir=tmp_path / "c")
    from seqc.backends import registry

    model = registry.backend("jax").multitask_model(
        joint.multi, joint.train_config, {"a": 0.5, "b": 0.5}
    )
    state = model.init(1)
    names = set(state["params"])
    assert "embed.table" in names and "a.embed.table" not in names and "b.embed.table" not in names
    assert {"a.out.w", "b.out.w"} <= names
    before = {k: np.asarray(v).copy() for k, v in state["params"].items()}
    batch = next(joint.sessions["b"].pipeline.batches("train"))
    state, metrics = model.train_step(state, {"b": batch}, {"b": 1e-2})
    assert set(metrics) == {"b"}
    after = {k: np.asarray(v) for k, v in state["params"].items()}
    assert not np.array_equal(before["embed.table"], after["embed.table"])  # b's step moved it
    assert not np.array_equal(before["b.out.w"], after["b.out.w"])
    assert np.array_equal(before["a.out.w"], after["a.out.w"])  # a's own: untouched


# ------------------------------------------------------------------------------ commands


def test_the_checkpoint_holds_each_shared_tensor_once(trained: tuple[Path, Path]) -> None:
    _, run = trained
    params = read_weights(run).params
    assert "blocks.0.attn.q.w" in params and "a.blocks.0.attn.q.w" not in params
    assert {"a.out.w", "b.out.w", "a.norm.scale", "b.norm.scale"} <= set(params)


def test_eval_takes_every_task_or_the_one_named(trained: tuple[Path, Path]) -> None:
    spec, run = trained
    base = ["eval", str(spec), "-e", "two", "--run-dir", str(run)]
    base += ["--cache-dir", str(spec.parent / "c")]
    both = runner.invoke(app, base)
    assert both.exit_code == 0, both.output
    assert "task a:" in both.output and "task b:" in both.output
    assert both.output.count("dev_perplexity") == 2
    one = runner.invoke(app, [*base, "--task", "b"])
    assert one.exit_code == 0, one.output
    assert one.output.count("dev_perplexity") == 1 and "task a:" not in one.output
    wrong = runner.invoke(app, [*base, "--task", "c"])
    assert wrong.exit_code != 0 and "unknown-task" in wrong.output


def test_decode_needs_the_task_of_a_multi_task_run(trained: tuple[Path, Path]) -> None:
    spec, run = trained
    base = ["decode", str(spec), "-e", "two", "--run-dir", str(run)]
    base += ["--cache-dir", str(spec.parent / "c")]
    lines = spec.parent / "prompts.txt"
    lines.write_text("the cat\n")
    vague = runner.invoke(app, [*base, "--input", str(lines)])
    assert vague.exit_code != 0 and "which-task" in vague.output and "--task a" in vague.output
    named = runner.invoke(app, [*base, "--input", str(lines), "--task", "a"])
    assert named.exit_code == 0, named.output


def test_export_writes_one_artifact_per_task_with_only_its_weights(
    trained: tuple[Path, Path],
) -> None:
    import onnx

    spec, run = trained
    out = spec.parent / "export"
    args = ["export", str(spec), "-e", "two", "--run-dir", str(run), "--format", "onnx"]
    args += ["--out", str(out), "--cache-dir", str(spec.parent / "c"), "--task", "b"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    models = sorted((out / "b").rglob("*.onnx"))
    assert models and not (out / "a").exists()
    names = {i.name for m in models for i in onnx.load(str(m)).graph.initializer}
    assert any(n.startswith("b.out") for n in names)
    assert any(n.startswith("embed") for n in names)  # the shared table travels with b
    assert not any(n.startswith("a.") for n in names)
    # decoding with it checks it against the spec's task (by default the one it holds)
    artifact = str(models[0].parent)
    lines = spec.parent / "one.txt"
    lines.write_text("the cat\n")
    base = ["decode", str(spec), "-e", "two", "--artifact", artifact, "--input", str(lines)]
    base += ["--cache-dir", str(spec.parent / "c")]
    assert runner.invoke(app, base).exit_code == 0
    other = runner.invoke(app, [*base, "--task", "a"])
    assert other.exit_code == 2 and "holds task `b`, not `a`" in other.output


def test_a_warm_start_loads_a_single_task_run_into_the_shared_layers(tmp_path: Path) -> None:
    spec = _write(
        tmp_path,
        extra=(
            "experiment warm extends two {\n"
            '  train.init_from = checkpoint("alone-run", map = {"embed.*": "embed.*", '
            '"blocks.*": "blocks.*", "norm.*": "a.norm.*", "out.*": "a.out.*"})\n'
            "}\n"
        ),
    )
    cache = tmp_path / "c"
    alone = open_training(spec, "alone", cache_dir=cache)
    first = train(alone, tmp_path / "alone-run", progress=False)
    warm = open_training(spec, "warm", ["train.steps=1"], cache_dir=cache)
    # "alone-run" is relative: found next to the spec
    result = train(warm, tmp_path / "warm-run", progress=False, eval_before=True)
    info = json.loads((tmp_path / "warm-run" / "run.json").read_text())["init_from"]
    loaded = dict(map(tuple, info["loaded"]))
    assert loaded["embed.table"] == "embed.table" and loaded["out.w"] == "a.out.w"
    assert "b.out.w" in info["fresh"]
    assert result.tasks_before is not None  # evaluated at step 0: the loaded weights
    from seqc.run.scoring.evaluate import evaluate

    alone_dev = evaluate(first.model, first.state["params"], alone.pipeline, "dev")
    assert abs(result.tasks_before["a"]["perplexity"] - alone_dev["perplexity"]) < 1e-3 * max(
        1.0, alone_dev["perplexity"]
    )


# ------------------------------------------------------------------------------ the example


# The books the slice's first lines come from: Genesis and Exodus (train: Genesis alone holds
# 1,500 pairs), Ruth (dev) and Esther (test), the first book of each split.
SLICE_BOOKS = "Gen 1:1-Exod 40:38;Ruth 1:1-4:22;Esth 1:1-10:3"


def _bible_slice(folder: Path) -> None:
    """A slice of the real verse-aligned corpus in `folder/.cache/data/bible-en-es`: from the
    prepared copy when there is one, else prepared here from the Debian SWORD modules' books
    that the slice reads (`SLICE_BOOKS`). Verses are aligned one by one and split by book, so
    these lines are the whole corpus's first lines; exporting and parsing the whole of both
    Bibles for them cost 10 CPU-seconds."""
    from seqc.data.corpora.bible import SOURCE_MODULE, TARGET_MODULE
    from seqc.data.prepare import prepare, prepared

    source = ROOT / ".cache" / "data"
    if prepared("bible-en-es", source) is None:
        import shutil
        import subprocess

        diatheke = shutil.which("diatheke")
        if diatheke is None:
            pytest.skip(
                "needs diatheke: apt-get install -y diatheke sword-text-kjv sword-text-sparv"
            )
        osis = folder / "osis"
        osis.mkdir()
        for module in (SOURCE_MODULE, TARGET_MODULE):
            args = [diatheke, "-b", module, "-f", "OSIS", "-k", SLICE_BOOKS]
            done = subprocess.run(args, capture_output=True, check=True, encoding="utf-8")
            (osis / f"{module}.osis").write_text(done.stdout, encoding="utf-8")
        source = folder / "full"
        prepare("bible-en-es", source, source=osis)
    target = folder / ".cache" / "data" / "bible-en-es"
    target.mkdir(parents=True)
    for split, n in (("train", 1500), ("dev", 40), ("test", 40)):
        lines = (source / "bible-en-es" / f"{split}.tsv").read_text().splitlines()[:n]
        assert len(lines) == n, f"{split}: {len(lines)} pairs"
        (target / f"{split}.tsv").write_text("\n".join(lines) + "\n")


def test_the_both_ways_example_trains_and_evaluates_each_direction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _bible_slice(tmp_path)
    monkeypatch.chdir(tmp_path)  # the spec's data paths are found in the working directory
    spec = ROOT / "examples" / "mt" / "bible_both_ways.seq"
    base = [str(spec), "-e", "mt.bible.both_ways.smoke", "--run-dir", "run", "--cache-dir", "c"]
    result = runner.invoke(app, ["train", *base])
    assert result.exit_code == 0, result.output
    assert "en_es: dev perplexity after 6 steps" in result.output
    assert "es_en: dev perplexity after 6 steps" in result.output
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["mix"]["by"] == "round_robin"
    # equal weights: the directions take turns, each step training one
    assert [r["task"] for r in _curve(tmp_path / "run")] == ["en_es", "es_en"] * 3
    assert info["shared"]["embed.table"] == ["en_es", "es_en"]
    assert any(n.startswith("encoder.0.") for n in info["shared"])
    assert not any(n.startswith(("en_es.decoder", "es_en.decoder")) for n in info["shared"])
    scored = runner.invoke(app, ["eval", *base, "--limit", "4"])
    assert scored.exit_code == 0, scored.output
    assert scored.output.count("dev_bleu") == 2 and scored.output.count("dev_chrf") == 2
    # each direction's artifact is scored into a folder of its own, as its checkpoint is: the
    # artifacts' folders share a name (run/export/TASK/onnx-none)
    exported = runner.invoke(app, ["export", *base, "--format", "onnx", "--bleu", "0"])
    assert exported.exit_code == 0, exported.output
    # its quality is a quick look, measured on a few batches: the table says so, as its
    # figures differ from seqc eval's over the whole split
    assert "quality on 2 dev batches of at most 8 rows" in " ".join(exported.output.split())
    for task in ("en_es", "es_en"):
        artifact = ["--artifact", f"run/export/{task}/onnx-none", "--limit", "2"]
        result = runner.invoke(app, ["eval", *base, *artifact])
        assert result.exit_code == 0, result.output
    for task in ("en_es", "es_en"):
        scores = json.loads(
            (tmp_path / "run" / "eval" / f"onnx-none-dev-{task}" / "scores.json").read_text()
        )
        assert scores["task"] == task and scores["examples"] == 2
