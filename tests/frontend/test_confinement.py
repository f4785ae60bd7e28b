"""Where imports may reach, and what an error may show (README, "Trust and limits").

A spec is text someone may hand you: `seqc check` on it must not read `/proc/self/environ` or
`/etc/shadow` and print them back. Imports resolve inside the root spec's project (the nearest
folder above it with `seqc.toml`, `pyproject.toml`, `.git` or a frozen copy's `ORIGIN`, else its
own folder), the folders of `SEQC_PATH`, and seqc's bundled examples; they name `.seq` files;
and no error ever quotes a line of a file that is not a `.seq` spec.

The suite's conftest makes pytest's temporary folders a library root; these tests unset it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqc.cli import app
from seqc.resolve.program import BUNDLED_EXAMPLES, SEQC_PATH, load_program
from seqc.spec.errors import SeqcError

runner = CliRunner()
SECRET = "hunter2-do-not-print"


@pytest.fixture(autouse=True)
def _confined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SEQC_PATH, raising=False)


def cli(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


def importer(folder: Path, target: str, name: str = "main.seq") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / name
    spec.write_text(f'seqc 1\nimport "{target}"\n')
    return spec


def load_error(spec: Path) -> SeqcError:
    with pytest.raises(SeqcError) as info:
        load_program(spec)
    return info.value


def assert_refused(spec: Path, code: str, line: int = 2, col: int = 1) -> str:
    """The CLI's error for `spec`: exit 2, the code at `line:col`, nothing secret printed."""
    err = load_error(spec)
    assert (err.phase, err.code) == ("resolve", code), err.render()
    assert err.span is not None and (err.span.line, err.span.col) == (line, col)
    result = cli("check", spec)
    assert result.exit_code == 2, result.output
    assert f"{spec}:{line}:{col}: resolve error [{code}]" in result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert SECRET not in result.output
    return result.output


# ------------------------------------------------------------------------------------ refused


def test_import_of_proc_self_environ_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEQC_TEST_SECRET", SECRET)
    output = assert_refused(importer(tmp_path, "/proc/self/environ"), "import-outside")
    assert "SEQC_TEST_SECRET" not in output


def test_import_of_etc_shadow_is_refused_unread(tmp_path: Path) -> None:
    output = assert_refused(importer(tmp_path, "/etc/shadow"), "import-outside")
    assert "root:" not in output


def test_outside_file_is_refused_the_same_whether_it_exists_or_not(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.seq").write_text(f"seqc 1\n# {SECRET}\n")
    there = load_error(importer(tmp_path / "proj", "../outside/secret.seq"))
    absent = load_error(importer(tmp_path / "proj", "../outside/absent.seq", "other.seq"))
    assert there.code == absent.code == "import-outside"
    assert there.message.replace("secret", "X") == absent.message.replace("absent", "X")


def test_symlink_out_of_the_tree_is_refused(tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text(SECRET + "\n")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "lib.seq").symlink_to(tmp_path / "outside.txt")
    assert_refused(importer(proj, "lib.seq"), "import-outside")


def test_import_of_a_file_that_is_not_a_spec_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(SECRET + "\n")
    (tmp_path / "link.seq").symlink_to(tmp_path / "notes.txt")
    assert_refused(importer(tmp_path, "notes.txt"), "import-not-seq")
    assert_refused(importer(tmp_path, "link.seq", "linked.seq"), "import-not-seq")


def test_symlink_loop_is_a_located_error(tmp_path: Path) -> None:
    (tmp_path / "loop.seq").symlink_to(tmp_path / "loop.seq")
    output = assert_refused(importer(tmp_path, "loop.seq"), "symlink-loop")
    assert "symlink loop" in output


def test_a_root_file_that_is_not_a_spec_is_never_quoted(tmp_path: Path) -> None:
    secret = tmp_path / "credentials"
    secret.write_text(f"API_KEY={SECRET}\n")
    result = cli("check", secret)
    assert result.exit_code == 2, result.output
    assert f"{secret}:1:1: parse error" in result.output  # located, not quoted
    assert SECRET not in result.output and "API_KEY" not in result.output


def test_the_hint_says_how_to_allow_a_library(tmp_path: Path) -> None:
    err = load_error(importer(tmp_path / "lm", "../common/blocks.seq"))
    assert err.code == "import-outside"
    assert SEQC_PATH in (err.hint or "")
    assert str(tmp_path / "lm") in (err.expected or "")


# ------------------------------------------------------------------------------------ allowed

BLOCKS = 'seqc 1\ninput shared { train = text("t.txt"); tokenizer = chars() }\n'


def sibling_layout(root: Path) -> Path:
    """`root/lm/main.seq` importing `../common/blocks.seq`, as the bundled examples do."""
    (root / "common").mkdir(parents=True)
    (root / "common" / "blocks.seq").write_text(BLOCKS)
    return importer(root / "lm", "../common/blocks.seq")


@pytest.mark.parametrize("marker", ["seqc.toml", "pyproject.toml", ".git", "ORIGIN"])
def test_a_project_marker_admits_sibling_folders(tmp_path: Path, marker: str) -> None:
    spec = sibling_layout(tmp_path)
    assert load_error(spec).code == "import-outside"  # no marker: the spec's folder only
    (tmp_path / marker).mkdir() if marker == ".git" else (tmp_path / marker).write_text("")
    assert "shared" in load_program(spec).inputs
    assert cli("check", spec).exit_code == 0


def test_seqc_path_admits_a_library_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = sibling_layout(tmp_path)
    monkeypatch.setenv(SEQC_PATH, os.pathsep.join(["", str(tmp_path / "elsewhere"), "~nobody"]))
    assert load_error(spec).code == "import-outside"
    monkeypatch.setenv(SEQC_PATH, os.pathsep.join([str(tmp_path / "other"), str(tmp_path)]))
    assert "shared" in load_program(spec).inputs


def test_the_bundled_examples_are_importable_from_anywhere(tmp_path: Path) -> None:
    assert BUNDLED_EXAMPLES is not None  # tests run from a source checkout
    common = BUNDLED_EXAMPLES / "common" / "transformer.seq"
    program = load_program(importer(tmp_path, common.as_posix()))
    assert "CausalBlock" in program.layers


def test_the_examples_check_from_the_repository(tmp_path: Path) -> None:
    assert BUNDLED_EXAMPLES is not None
    result = cli("check", BUNDLED_EXAMPLES / "lm" / "shakespeare.seq")
    assert result.exit_code == 0, result.output


def test_a_run_directory_freezes_the_texts_that_were_parsed(tmp_path: Path) -> None:
    """An import edited just after `seqc train` parsed it reached RUN/spec/ (the files were
    copied from disk at the run's start), while the run trained the old text."""
    from seqc.run.rundir.directory import copy_spec_tree

    spec = sibling_layout(tmp_path / "project")
    (tmp_path / "project" / "seqc.toml").write_text("")
    program = load_program(spec)
    originals = {Path(f.path).resolve(): Path(f.path).read_text() for f in program.files}
    for path in originals:  # edited on disk after the parse
        path.write_text(path.read_text() + "\n# edited after the run parsed me\n")
    frozen = copy_spec_tree(program, tmp_path / "run" / "spec")
    copies = sorted((tmp_path / "run" / "spec").rglob("*.seq"))
    assert len(copies) == len(originals) >= 2 and frozen in copies
    assert sorted(c.read_text() for c in copies) == sorted(originals.values())


def test_a_run_directory_copy_resolves_its_imports_inside_itself(tmp_path: Path) -> None:
    from seqc.run.rundir.directory import copy_spec_tree

    spec = sibling_layout(tmp_path / "project")
    (tmp_path / "project" / "seqc.toml").write_text("")
    frozen = copy_spec_tree(load_program(spec), tmp_path / "run" / "spec")
    assert frozen == tmp_path / "run" / "spec" / "lm" / "main.seq"
    assert "shared" in load_program(frozen).inputs  # `ORIGIN` marks the copy's top
    result = cli("check", frozen)
    assert result.exit_code == 0, result.output
