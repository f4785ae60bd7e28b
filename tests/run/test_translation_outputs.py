"""Translation outputs that other tools can read: `seqc decode` into a pipe or `--output` writes
one detokenized hypothesis per input line and nothing else, and `seqc eval` scores the whole test
split, prints sacreBLEU's signatures and writes the hypotheses beside the scores in the run
directory. Each file appears whole or not at all.

A tiny encoder-decoder (it learns to reverse a few words) is trained for a few steps once for
the module; the tests read its outputs, not its quality.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import sacrebleu
from tiny_specs import TRANSLATE_SPEC
from typer.testing import CliRunner

from seqc.cli import app
from seqc.cli import decode as decode_commands
from seqc.cli import eval as eval_commands
from seqc.run.rundir.outputs import LineFile, one_line, write_folder
from seqc.spec.errors import FileError

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

# test_translate's reversal task, with a test split, greedy decoding and 30 steps
SPEC = (
    TRANSLATE_SPEC.replace(
        '  dev = tsv("dev.tsv")\n', '  dev = tsv("dev.tsv")\n  test = tsv("test.tsv")\n'
    )
    .replace("decode = beam(width = 2, max_length = 8)", "decode = greedy(max_length = 8)")
    .replace("steps = 60;", "steps = 30;")
)

SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"
TEST_SIZE = 12


def _pairs(folder: Path) -> dict[str, list[tuple[str, str]]]:
    rng = random.Random(1)
    words = [f"w{i}" for i in range(12)]
    splits = {}
    for split, n in (("train", 300), ("dev", 10), ("test", TEST_SIZE)):
        rows = []
        for _ in range(n):
            src = [rng.choice(words) for _ in range(rng.randint(2, 5))]
            rows.append((" ".join(src), " ".join(reversed(src))))
        (folder / f"{split}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in rows))
        splits[split] = rows
    return splits


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path, dict]:
    folder = tmp_path_factory.mktemp("rev")
    splits = _pairs(folder)
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    (folder / "rev.seq").write_text(SPEC.format(common=common))
    run_dir = folder / "run"
    base = [str(folder / "rev.seq"), "-e", "rev", "--cache-dir", str(folder / "cache")]
    base += ["--run-dir", str(run_dir)]
    result = runner.invoke(app, ["train", *base, "--no-progress"])
    assert result.exit_code == 0, result.output
    return base, run_dir, splits


def _sources(folder: Path, rows: list[str]) -> Path:
    path = folder / "sources.txt"
    path.write_text("".join(f"{r}\n" for r in rows))
    return path


def test_decode_into_a_pipe_writes_one_bare_hypothesis_per_input_line(run, tmp_path) -> None:
    base, _, splits = run
    sources = [s for s, _ in splits["test"][:3]]
    path = _sources(tmp_path, [sources[0], "", sources[1], sources[2]])
    result = runner.invoke(app, ["decode", *base, "--input", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")
    assert lines[-1] == "" and len(lines) == 5  # four lines, each ended by a newline
    assert lines[1] == ""  # an empty source stays an empty line
    assert all(lines[i] for i in (0, 2, 3)) and "->" not in result.stdout
    assert all(line.split()[0].startswith("w") for line in lines if line)  # target words only
    # stdin reads the same; CRLF endings and a form feed inside a line do not add lines
    crlf = "\r\n".join([sources[0], "", sources[1] + "\f", sources[2]]) + "\r\n"
    again = runner.invoke(app, ["decode", *base, "--input", "-"], input=crlf)
    assert again.exit_code == 0, again.output
    assert len(again.stdout.split("\n")) == 5


def test_decode_output_file_matches_the_pipe_and_eval(run, tmp_path) -> None:
    base, run_dir, splits = run
    path = _sources(tmp_path, [s for s, _ in splits["test"]])
    target = tmp_path / "out" / "hyps.txt"
    target.parent.mkdir()
    result = runner.invoke(app, ["decode", *base, "--input", str(path), "--output", str(target)])
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and f"wrote {TEST_SIZE} lines to {target}" in result.stderr
    assert [p.name for p in target.parent.iterdir()] == ["hyps.txt"]  # no temporary file left
    hyps = target.read_text().split("\n")
    assert len(hyps) == TEST_SIZE + 1 and hyps[-1] == ""
    piped = runner.invoke(app, ["decode", *base, "--input", str(path)])
    assert piped.stdout == target.read_text()
    scored = runner.invoke(app, ["eval", *base, "--split", "test"])
    assert scored.exit_code == 0, scored.output
    folder = run_dir / "eval" / "30-test"
    # what `decode` writes is what `eval` scored: same decoder, strategy and detokenization
    assert (folder / "hypotheses.txt").read_text() == target.read_text()


def test_eval_scores_the_whole_test_split_and_writes_its_translations(
    run, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, run_dir, splits = run
    monkeypatch.setattr(eval_commands, "DEV_LIMIT", 4)  # dev's default cap; test has none
    result = runner.invoke(app, ["eval", *base, "--split", "test"])
    assert result.exit_code == 0, result.output
    assert f"({TEST_SIZE} examples; {SIGNATURE}" in result.stdout
    chrf = next(line for line in result.stdout.splitlines() if line.startswith("test_chrf:"))
    assert "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" in chrf
    folder = run_dir / "eval" / "30-test"
    assert f"test hypotheses and scores: {folder}" in result.stdout
    hyps = (folder / "hypotheses.txt").read_text().splitlines()
    refs = (folder / "references.txt").read_text().splitlines()
    srcs = (folder / "sources.txt").read_text().splitlines()
    assert len(hyps) == len(refs) == len(srcs) == TEST_SIZE
    assert list(zip(srcs, refs, strict=True)) == splits["test"]
    scores = json.loads((folder / "scores.json").read_text())
    assert scores["examples"] == TEST_SIZE and scores["split"] == "test"
    assert scores["checkpoint"]["step"] == 30 and scores["limit"] == 0
    assert scores["decode"] == {"kind": "greedy", "args": {"max_length": 8, "warp": None}}
    assert scores["signatures"]["bleu"].startswith(SIGNATURE)
    # the files rescore to the printed figure with sacreBLEU itself
    assert sacrebleu.corpus_bleu(hyps, [refs]).score == pytest.approx(scores["bleu"])
    assert f"test_bleu: {scores['bleu']:.2f}  (" in result.stdout

    capped = runner.invoke(app, ["eval", *base, "--split", "test", "--limit", "3"])
    assert capped.exit_code == 0, capped.output
    assert "(3 examples; " in capped.stdout
    assert len((folder / "hypotheses.txt").read_text().splitlines()) == 3  # replaced whole
    assert json.loads((folder / "scores.json").read_text())["limit"] == 3
    dev = runner.invoke(app, ["eval", *base])
    assert dev.exit_code == 0, dev.output
    assert "(4 examples; " in dev.stdout
    assert len((run_dir / "eval" / "30-dev" / "hypotheses.txt").read_text().splitlines()) == 4
    assert not [p for p in (run_dir / "eval").iterdir() if p.name.startswith(".")]


def test_decoding_a_file_in_batches_gives_each_line_its_own_translation(
    run, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`seqc decode --input` translates its lines several at a time (`hypotheses`): chunked
    differently, or one line at a time (`hypothesis`), the lines are the same."""
    from seqc.run.decoding import text_decoder

    base, _, splits = run
    path = _sources(tmp_path, [*(s for s, _ in splits["test"][:9]), ""])
    batched = runner.invoke(app, ["decode", *base, "--input", str(path)])
    assert batched.exit_code == 0, batched.output
    monkeypatch.setattr(text_decoder, "STREAM_CHUNK", 3)
    chunked = runner.invoke(app, ["decode", *base, "--input", str(path)])
    assert chunked.stdout == batched.stdout

    def one_at_a_time(gen: object, lines: list[str]) -> Iterator[str]:
        return (text_decoder.hypothesis(gen, line) for line in lines)

    monkeypatch.setattr(decode_commands, "hypotheses", one_at_a_time)
    alone = runner.invoke(app, ["decode", *base, "--input", str(path)])
    assert alone.stdout == batched.stdout and batched.stdout.endswith("\n\n")


def test_eval_of_an_artifact_scores_the_split_as_the_checkpoint_is(run, tmp_path) -> None:
    """`seqc eval --artifact`: the exported fp32 ONNX translator decodes the test split as the
    checkpoint does (same strategy, same scorer), its files in RUN/eval/onnx-none-test."""
    base, run_dir, _ = run
    exported = runner.invoke(
        app, ["export", *base, "--format", "onnx", "--quantize", "none", "--out", str(tmp_path)]
    )
    assert exported.exit_code == 0, exported.output
    artifact = tmp_path / "onnx-none"
    result = runner.invoke(app, ["eval", *base, "--split", "test", "--artifact", str(artifact)])
    assert result.exit_code == 0, result.output
    assert f"({TEST_SIZE} examples; {SIGNATURE}" in result.stdout
    folder = run_dir / "eval" / "onnx-none-test"
    scores = json.loads((folder / "scores.json").read_text())
    assert scores["artifact"]["format"] == "onnx" and scores["artifact"]["quantize"] == "none"
    assert scores["artifact"]["checkpoint"]["step"] == 30
    checkpoint = runner.invoke(app, ["eval", *base, "--split", "test"])
    assert checkpoint.exit_code == 0, checkpoint.output
    ours = (run_dir / "eval" / "30-test" / "hypotheses.txt").read_text()
    assert (folder / "hypotheses.txt").read_text() == ours
    both = ["eval", *base, "--artifact", str(artifact), "--checkpoint", str(run_dir)]
    conflict = runner.invoke(app, both)
    assert conflict.exit_code == 2 and "give one" in conflict.output
    missing = runner.invoke(app, ["eval", *base, "--artifact", str(tmp_path / "nothing")])
    assert missing.exit_code == 2 and "no artifact at" in missing.output
    assert "Traceback" not in missing.output


def test_an_unwritable_output_fails_before_decoding(run, tmp_path) -> None:
    base, _, splits = run
    path = _sources(tmp_path, [splits["test"][0][0]])
    missing = tmp_path / "no-such-folder" / "hyps.txt"
    result = runner.invoke(app, ["decode", *base, "--input", str(path), "--output", str(missing)])
    assert result.exit_code == 2, result.output
    assert f"{missing}: file error [output-unwritable]: cannot write {missing}" in result.output
    assert "Traceback" not in result.output
    result = runner.invoke(app, ["decode", *base, "--input", str(path), "--output", str(tmp_path)])
    assert result.exit_code == 2 and "it is a directory" in result.output
    result = runner.invoke(app, ["decode", *base, "--output", str(tmp_path / "x.txt")])
    assert result.exit_code == 2 and "--output needs --input" in result.output


def test_an_interrupted_decode_leaves_the_earlier_file(
    run, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, _, splits = run
    path = _sources(tmp_path, [s for s, _ in splits["test"][:3]])
    target = tmp_path / "hyps.txt"
    target.write_text("earlier\n")
    calls = []

    def stop_at_the_second(gen: object, lines: list[str]) -> Iterator[str]:
        for line in lines:
            calls.append(line)
            if len(calls) == 2:
                raise KeyboardInterrupt
            yield "half"

    monkeypatch.setattr(decode_commands, "hypotheses", stop_at_the_second)
    result = runner.invoke(app, ["decode", *base, "--input", str(path), "--output", str(target)])
    assert result.exit_code == 130 and len(calls) == 2  # 128 + SIGINT, as a shell reports
    assert target.read_text() == "earlier\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hyps.txt", "sources.txt"]


def test_line_files_and_folders_are_written_whole(tmp_path: Path) -> None:
    assert one_line("a\nb\r\nc") == "a b  c"
    with LineFile(tmp_path / "x.txt") as f:
        f.write("one\ntwo")
        f.write("")
    assert (tmp_path / "x.txt").read_text() == "one two\n\n" and f.lines == 2
    with pytest.raises(FileError) as e:
        LineFile(tmp_path / "missing" / "x.txt")
    assert e.value.code == "output-unwritable" and e.value.path == str(tmp_path / "missing/x.txt")
    write_folder(tmp_path / "d", {"a.txt": ["1", "2"], "b.json": "{}\n"})
    write_folder(tmp_path / "d", {"a.txt": ["3"]})
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["a.txt"]
    assert (tmp_path / "d" / "a.txt").read_text() == "3\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "x.txt"]


def test_an_averaged_checkpoint_is_evaluated_under_its_own_name(tmp_path: Path) -> None:
    """`seqc average` names its newest step, as the run's checkpoint of that step is named:
    their evaluations go to folders of their own."""
    from seqc.run.scoring.checkpoint_eval import checkpoint_tag as _checkpoint_tag

    run = tmp_path / "run"
    assert _checkpoint_tag(run, run / "checkpoints", 30) == "30"
    assert _checkpoint_tag(run, run / "checkpoints" / "30", 30) == "30"
    assert _checkpoint_tag(run, run / "averaged" / "last-3-step-30", 30) == "last-3-step-30"
    assert _checkpoint_tag(run, tmp_path / "elsewhere", 30) == "elsewhere-30"
