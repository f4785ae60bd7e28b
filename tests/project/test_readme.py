"""The README and `docs/` are checked like code, so that they cannot drift from seqc.

- every `seq` code block parses and formats to itself; a complete program (one that opens with
  its `seqc 1` header) also passes `seqc check` beside `examples/common/`; the language
  reference's tour resolves as its text says;
- every relative link points at a file that exists, and its `#anchor` at a heading there;
- every `seqc ...` command line (in a code block or a code span) names real commands and flags;
- every flag of every command is in the commands reference, and every error code raised in
  `seqc/` is in the errors reference.
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer

from seqc.cli import app
from seqc.compiler.check import check_program
from seqc.resolve.program import load_program
from seqc.spec.parser import parse_text
from seqc.spec.printer import format_spec

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
COMMANDS = DOCS / "reference" / "commands.md"
ERRORS = DOCS / "reference" / "errors.md"
LANGUAGE = DOCS / "reference" / "language.md"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]

FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SHELL = {"sh", "bash", "console", "shell"}
STOPS = {"|", ";", "&&", "||", ">", "<", ">>"}
"""Shell words that end a command."""


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(page: Path, language: set[str]) -> Iterator[tuple[int, str]]:
    """The code blocks of `page` in one of `language`, with the line each starts on."""
    text = page.read_text(encoding="utf-8")
    for match in FENCE.finditer(text):
        if match.group(1) in language:
            yield text.count("\n", 0, match.start()) + 1, match.group(2)


def _prose(page: Path) -> str:
    """`page` without its fenced code blocks (links and code spans live in the prose)."""
    return FENCE.sub("", page.read_text(encoding="utf-8"))


SNIPPETS = [
    pytest.param(text, id=f"{_name(page)}:{line}")
    for page in PAGES
    for line, text in _blocks(page, {"seq"})
]


def test_the_docs_hold_spec_snippets() -> None:
    assert len(SNIPPETS) >= 8, "the README and docs/ show the language in `seq` blocks"


@pytest.mark.parametrize("text", SNIPPETS)
def test_every_snippet_parses_and_formats_to_itself(text: str) -> None:
    """A fragment (a block, a task, an experiment) is parsed as a file of its own."""
    source = text if text.lstrip().startswith("seqc ") else f"seqc 1\n{text}"
    spec = parse_text(source, "snippet.seq")
    again = parse_text(format_spec(spec), "snippet.seq")
    assert format_spec(again) == format_spec(spec)


@pytest.mark.parametrize("text", [p for p in SNIPPETS if p.values[0].startswith("seqc ")])
def test_every_complete_program_checks(text: str, tmp_path: Path) -> None:
    _checked(text, tmp_path)


def _checked(text: str, tmp_path: Path) -> list[Any]:
    """`seqc check` of a program that sits in a folder beside a copy of `examples/common/`."""
    shutil.copytree(ROOT / "examples" / "common", tmp_path / "common")
    (tmp_path / "lm").mkdir()
    spec = tmp_path / "lm" / "snippet.seq"
    spec.write_text(text)
    return check_program(load_program(spec))


def _tour() -> str:
    section = LANGUAGE.read_text(encoding="utf-8").split("## A tour", 1)[1]
    match = FENCE.search(section)
    assert match and match.group(1) == "seq", "the tour's code block is missing"
    return match.group(2)


def test_the_tour_resolves_as_it_says(tmp_path: Path) -> None:
    resolved = _checked(_tour(), tmp_path)
    assert [r.name for r in resolved] == ["lm.shakespeare.tiny", "lm.shakespeare.small"]
    small = resolved[1]
    assert small.get("lm.model.d") == 512
    assert small.get("lm.model.ff") == 2048  # the default `4 * d` follows the override
    assert small.get("train.steps") == 20000


def test_the_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make run" in text and "make test" in text
    assert len(text.splitlines()) <= 220, "keep the README short: move detail into docs/"


# ---------------------------------------------------------------------------------- links


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to `-`."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text))


@cache
def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", _prose(page), re.M)
    return {_slug(h) for h in headings}


def _links() -> Iterator[tuple[Path, str]]:
    for page in PAGES:
        for target in LINK.findall(_prose(page)):
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                yield page, target


def test_the_docs_hold_links() -> None:
    assert sum(1 for _ in _links()) >= 40


@pytest.mark.parametrize(
    ("page", "target"), [pytest.param(p, t, id=f"{_name(p)}->{t}") for p, t in _links()]
)
def test_every_relative_link_points_at_a_file(page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    assert file.exists(), f"{_name(page)} links to {target}, which does not exist"
    assert file.is_relative_to(ROOT), f"{_name(page)} links outside the repository: {target}"
    if anchor and file.suffix == ".md":
        assert anchor in _anchors(file), f"{_name(page)}: no heading `#{anchor}` in {target}"


# ------------------------------------------------------------------------------- commands


@cache
def _commands() -> dict[str, set[str]]:
    """Every command and group of `seqc` ("train", "data", "data prepare") -> its flags, as
    `--help` lists them."""
    found: dict[str, set[str]] = {}

    def walk(command: Any, path: list[str]) -> None:
        flags = {"-h", "--help"}
        for param in command.params:
            flags |= {*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())}
        found[" ".join(path)] = {f for f in flags if f.startswith("-")}
        if hasattr(command, "list_commands"):
            ctx = command.context_class(command)
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def _check_command_line(words: list[str], where: str) -> None:
    """`words` follow `seqc`: global flags, the command, its words and flags."""
    words = [w for w in words if w]
    while words and words[0].startswith("-"):  # `seqc --debug ...`
        assert words.pop(0) in {"--debug", "-h", "--help"}, f"{where}: unknown global flag"
    if not words or not re.match(r"[a-z]", words[0]):  # `seqc`, `seqc 1`, `seqc COMMAND`
        return
    name = words.pop(0)
    if name == "data" and words and re.match(r"[a-z]", words[0]):
        name = f"data {words.pop(0)}"
    assert name in _commands() and name, f"{where}: `seqc {name}` is not a command"
    if name == "launch" and "--" in words:  # `seqc launch -n 2 -- train ...`
        cut = words.index("--")
        _check_command_line(words[cut + 1 :], where)
        words = words[:cut]
    for word in words:
        flag = word.split("=", 1)[0]
        if flag.startswith("-") and flag != "-" and not re.match(r"-\d", flag):
            assert flag in _commands()[name], f"{where}: `seqc {name}` has no flag {flag}"


def _code_span_lines() -> Iterator[tuple[str, list[str]]]:
    """`seqc ...` in a code span, read as a synopsis: `[--backend jax|tf]` names `--backend`."""
    for page in PAGES:
        for span in re.findall(r"`([^`]+)`", _prose(page)):
            for part in re.split(r"\s*(?:&&|;)\s*", " ".join(span.split())):
                if part.startswith("seqc "):
                    words = re.split(r"[\s|\[\]()]+", part.replace("\\|", "|"))
                    yield f"{_name(page)}: `{part}`", [w.rstrip(".,") for w in words[1:]]


def _shell_lines() -> Iterator[tuple[str, list[str]]]:
    """`seqc ...` in a shell block: continued lines joined, pipes and env settings skipped."""
    for page in PAGES:
        for line, block in _blocks(page, SHELL):
            for text in block.replace("\\\n", " ").splitlines():
                lexer = shlex.shlex(text.removeprefix("$ "), posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                lexer.commenters = "#"
                words = list(lexer)
                for i, word in enumerate(words):
                    if word == "seqc":
                        rest = words[i + 1 :]
                        stop = next((j for j, w in enumerate(rest) if w in STOPS), len(rest))
                        yield f"{_name(page)}:{line}: {text.strip()}", rest[:stop]


def test_the_docs_hold_command_lines() -> None:
    assert sum(1 for _ in _shell_lines()) >= 20 and sum(1 for _ in _code_span_lines()) >= 50


@pytest.mark.parametrize(
    ("where", "words"),
    [pytest.param(w, ws, id=w[:90]) for w, ws in [*_shell_lines(), *_code_span_lines()]],
)
def test_every_command_line_names_real_commands_and_flags(where: str, words: list[str]) -> None:
    _check_command_line(words, where)


def test_the_commands_reference_lists_every_command_and_flag() -> None:
    text = COMMANDS.read_text(encoding="utf-8")
    sections = {s.split("\n", 1)[0].strip(): s for s in re.split(r"^### ", text, flags=re.M)}
    missing = []
    for command, flags in sorted(_commands().items()):
        if not command:  # `seqc` itself: its flags are the global ones
            continue
        heading = f"seqc {command.split()[0]}"  # `seqc data` covers prepare and list
        section = sections.get(heading)
        if section is None:
            missing.append(f"no section `### {heading}`")
            continue
        for flag in sorted(flags - {"-h", "--help"}):
            if not re.search(rf"`{re.escape(flag)}`", section):
                missing.append(f"`seqc {command}` {flag}")
    assert not missing, "docs/reference/commands.md lacks:\n" + "\n".join(missing)


def test_the_commands_reference_lists_no_flag_a_command_lacks() -> None:
    """Each section's flag table (`| --flag | ...`) names only its command's flags."""
    text = COMMANDS.read_text(encoding="utf-8")
    wrong = []
    for section in re.split(r"^### ", text, flags=re.M)[1:]:
        heading, _, body = section.partition("\n")
        group = heading.removeprefix("seqc ").strip()
        flags = set().union(*(f for c, f in _commands().items() if c.split(" ")[:1] == [group]))
        for row in re.findall(r"^\| (`-.*?) \|", body, re.M):
            wrong += [f"{heading}: {f}" for f in re.findall(r"`(-[-\w]+)`", row) if f not in flags]
    assert not wrong, "flags the commands do not have:\n" + "\n".join(wrong)


# --------------------------------------------------------------------------------- errors


def _error_codes() -> set[str]:
    """Every literal error code in `seqc/`: `code="..."` arguments and `code: str = "..."`."""
    codes = set()
    for path in (ROOT / "seqc").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            values: list[ast.expr] = []
            if isinstance(node, ast.Call):
                values = [k.value for k in node.keywords if k.arg == "code"]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                values = [node.value] if node.target.id == "code" and node.value else []
            codes |= {v.value for v in values if isinstance(v, ast.Constant)}
    return {c for c in codes if isinstance(c, str) and c != "error"}


def test_the_errors_reference_lists_every_code() -> None:
    codes = _error_codes()
    assert len(codes) > 150
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", ERRORS.read_text(encoding="utf-8"), re.M))
    missing = sorted(codes - listed)
    assert not missing, "docs/reference/errors.md lacks the codes: " + ", ".join(missing)
