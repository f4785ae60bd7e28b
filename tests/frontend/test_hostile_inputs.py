"""Inputs chosen to hurt: devices and pipes as specs, frames that lie, escape codes in a spec.

Each test is a fault found from outside (issue 32) and the behaviour that replaced it:

- A spec path that names a device, a pipe or a huge file is refused before a byte is read
  (`seqc.spec.files`), by every command, at an import's line, in the `check` verdict cache and
  in the language server. `/dev/zero` used to be read without end (13 GB in 8 s); a pipe's
  `open` waited forever. A regression must fail the test, not take the machine down or hang
  the suite: devices are given to seqc in a subprocess with a memory cap and a timeout; pipes,
  which can stop an `open` but never fill memory, to the CLI in this process under a time
  limit (and the `pipe` fixture then opens the pipe's write end, so that no reader is left
  waiting on it), which costs a tenth of a subprocess's start.
- The language server reads on after a frame whose `Content-Length` is too short or too long
  (`seqc.lsp.framing`), and `exit` without `shutdown` ends it with 1.
- Control, escape and bidi characters of a spec reach the terminal, the editor and the logs as
  visible escapes (`seqc.spec.printable`), in every field of an error, with the caret still
  under its character.
- Import completion does not offer the buffer's own file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pygls.workspace import Workspace
from spec_fuzz import time_limit
from typer.testing import CliRunner, Result

from seqc.cli import app
from seqc.lsp import diagnostics
from seqc.lsp.completion import complete
from seqc.lsp.documents import Analysis
from seqc.lsp.framing import Dropped, Frames
from seqc.spec.errors import CheckError, FileError, Note, remember_source
from seqc.spec.files import MAX_SPEC_BYTES, peek_spec, read_spec
from seqc.spec.ir import Span
from seqc.spec.printable import printable

LIMIT_S = 30
"""No subprocess runs longer than this: a read without end fails the test, not the suite."""

MEMORY = 3 * 2**30
"""The address space a subprocess may use: reading /dev/zero without a bound passes it in
seconds (a MemoryError), far below what hurts the machine."""

UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""What must never reach a terminal: control characters but the newline, bidi controls."""

SPEC = textwrap.dedent(
    """\
    seqc 1
    input data { train = text("t.txt"); tokenizer = chars() }
    model M(vocab: int, d: int = 8) {
      embed = Embedding(vocab, d)
      forward (ids: int32[B, T]) -> float32[B, T, d] { return embed(ids) }
    }
    task lm { input = data; model = M(vocab = input.vocab_size) }
    experiment e { tasks = [lm] }
    """
)
EVIL = "\u202e ... \x1b[31mred\x07\x9b\x7f"
"""The issue's string: a bidi override, a colour escape, a bell, a C1 CSI and DEL."""
EVIL_SPEC = SPEC.replace("tasks = [lm] }", f'tasks = [lm]; train.steps = "{EVIL}" }}')

runner = CliRunner()


def cli(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def seqc(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`seqc ARGS` in a subprocess, with its memory capped and a time limit."""
    return subprocess.run(
        [sys.executable, "-m", "seqc.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        preexec_fn=_cap_memory,
        cwd=cwd,
    )


def cli_within_limit(*args: str | Path) -> Result:
    """`seqc ARGS` in this process, stopped after `LIMIT_S` (for a pipe: see the module doc)."""
    with time_limit(LIMIT_S):
        return cli(*args)


def refused(done: subprocess.CompletedProcess[str] | Result, code: str) -> str:
    """The output of a run that refused a file with `code`, cleanly: exit 2, a hint."""
    if isinstance(done, Result):
        output, status = done.output, done.exit_code
    else:
        output, status = done.stdout + done.stderr, done.returncode
    assert status == 2, output
    assert f"file error [{code}]" in output, output
    assert "hint: " in output and "Traceback" not in output, output
    return output


# ------------------------------------------------------------------------ reading spec files


@pytest.mark.parametrize(
    ("command", "device"),
    [("check", "/dev/zero"), ("fmt", "/dev/urandom"), ("train", "/dev/zero")],
)
def test_a_device_is_refused_before_it_is_read(command: str, device: str) -> None:
    if not Path(device).exists():
        pytest.skip(f"no {device} here")
    args = [command, device] + (["-e", "x"] if command == "train" else [])
    start = time.monotonic()
    output = refused(seqc(*args), "not-a-file")
    assert f"{device}: file error [not-a-file]: {device} is a character device" in output
    assert time.monotonic() - start < 10


@pytest.fixture
def pipe(tmp_path: Path) -> Iterator[Path]:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    path = tmp_path / "pipe.seq"
    os.mkfifo(path)
    yield path
    release(path)


def release(pipe: Path) -> None:
    """Open the pipe's write end and close it: a reader that a regression left waiting in
    `open` (where the time limit cannot reach: a thread, a forked helper) reads the end of the
    file and goes on, instead of keeping the test process from exiting."""
    with contextlib.suppress(OSError):  # ENXIO: no reader waits, as it should be
        os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))


def test_every_command_that_reads_a_spec_refuses_a_named_pipe(pipe: Path) -> None:
    for args in (["check"], ["fmt", "--check"], ["list"], ["show", "-e", "x"]):
        output = refused(cli_within_limit(args[0], pipe, *args[1:]), "not-a-file")
        assert f"{pipe} is a named pipe, not a regular file" in output


def test_a_spec_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "big.seq"
    with big.open("wb") as f:  # sparse: costs no disk
        f.truncate(MAX_SPEC_BYTES + 1)
    for command in ("check", "fmt", "list"):
        result = cli(command, big)
        assert result.exit_code == 2, result.output
        assert f"{big}: file error [file-too-large]" in result.output
        assert f"found:    {MAX_SPEC_BYTES + 1:,} bytes" in result.output
        assert "hint: split the spec into files that import each other" in result.output


def test_a_spec_at_the_size_limit_is_read(tmp_path: Path) -> None:
    spec = tmp_path / "padded.seq"
    with spec.open("wb") as f:
        f.truncate(MAX_SPEC_BYTES)
    assert len(read_spec(spec)) == MAX_SPEC_BYTES


def test_imports_of_a_pipe_and_of_a_large_file_are_refused_at_their_line(
    tmp_path: Path, pipe: Path
) -> None:
    (tmp_path / "seqc.toml").write_text("")
    with (tmp_path / "big.seq").open("wb") as f:
        f.truncate(MAX_SPEC_BYTES + 1)
    for name, code in (("pipe.seq", "not-a-file"), ("big.seq", "file-too-large")):
        main = tmp_path / f"main-{code}.seq"
        main.write_text(f'seqc 1\n\nimport "{name}"\n')
        output = refused(cli_within_limit("check", main), code)
        assert f"{main}:3:1: file error [{code}]" in output
        assert f'import "{name}"' in output  # the excerpt: the import line, with its caret


def test_a_checked_file_swapped_for_a_pipe_is_not_read_from_the_verdict_cache(
    tmp_path: Path,
) -> None:
    (tmp_path / "seqc.toml").write_text("")
    (tmp_path / "lib.seq").write_text("seqc 1\n")
    main = tmp_path / "main.seq"
    main.write_text('seqc 1\nimport "lib.seq"\n')
    passed = cli_within_limit("check", main)
    assert passed.exit_code == 0, passed.output  # and its verdict is recorded
    (tmp_path / "lib.seq").unlink()
    os.mkfifo(tmp_path / "lib.seq")
    try:
        output = refused(cli_within_limit("check", main), "not-a-file")
    finally:
        release(tmp_path / "lib.seq")
    assert f"{main}:2:1: file error [not-a-file]" in output


def test_a_refused_file_is_no_text_for_what_can_do_without(tmp_path: Path, pipe: Path) -> None:
    assert peek_spec(pipe) is None
    assert peek_spec(tmp_path / "missing.seq") is None
    (tmp_path / "latin1.seq").write_bytes(b"seqc 1\n# caf\xe9\n")
    assert peek_spec(tmp_path / "latin1.seq") == "seqc 1\n# caf\ufffd\n"
    with pytest.raises(FileError) as info:
        read_spec(pipe)
    assert (info.value.code, info.value.path) == ("not-a-file", str(pipe))


# ------------------------------------------------------------------------ the language server


class Server:
    """`seqc lsp` over pipes, spoken to frame by frame: pytest-lsp cannot send a broken frame.
    Made by the `servers` fixture, which kills any left running."""

    def __init__(self, cwd: Path) -> None:
        self.log = cwd / ".lsp-stderr"  # a file: a pipe nobody reads could fill and block
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "seqc.cli", "lsp"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=cwd,
            )
        self.buf = b""
        self.ids = 0
        self.notes: list[dict[str, Any]] = []
        """Notifications from the server, in order."""

    def initialize(self) -> None:
        self.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        self.notify("initialized", {})

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def notify(self, method: str, params: Any = None) -> None:
        self.send(frame({"jsonrpc": "2.0", "method": method, "params": params}))

    def request(self, method: str, params: Any = None) -> dict[str, Any]:
        """Send a request and return its response; fail if none comes within `LIMIT_S`."""
        self.ids += 1
        self.send(frame({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}))
        deadline = time.monotonic() + LIMIT_S
        while True:
            message = self._next(deadline)
            assert message is not None, f"no answer to {method} in {LIMIT_S} s"
            if message.get("id") == self.ids and "method" not in message:
                return message
            self.notes.append(message)

    def _next(self, deadline: float) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if sep:
                n = int(re.search(rb"Content-Length: *(\d+)", head).group(1))  # type: ignore[union-attr]
                if len(rest) >= n:
                    self.buf = rest[n:]
                    return json.loads(rest[:n])
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 1 << 16) if ready else b""
            if not chunk:
                return None
            self.buf += chunk

    def open(self, path: Path, text: str) -> str:
        uri = path.resolve().as_uri()
        doc = {"uri": uri, "languageId": "seq", "version": 1, "text": text}
        self.notify("textDocument/didOpen", {"textDocument": doc})
        return uri

    def diagnostics(self, uri: str) -> list[dict[str, Any]]:
        """The diagnostics last published for `uri`, once the server has handled what came
        before (a request is answered after the checks that changes left pending)."""
        self.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
        published = [
            n["params"]["diagnostics"]
            for n in self.notes
            if n.get("method") == "textDocument/publishDiagnostics" and n["params"]["uri"] == uri
        ]
        assert published, self.notes
        return published[-1]

    def exit(self) -> tuple[int, str]:
        """Send `exit`; the exit code and what the server wrote to stderr."""
        self.notify("exit")
        try:
            code = self.proc.wait(LIMIT_S)
        finally:
            self.proc.kill()
        return code, self.log.read_text(encoding="utf-8", errors="replace")


@pytest.fixture
def servers() -> Iterator[Callable[[Path], Server]]:
    started: list[Server] = []

    def start(cwd: Path) -> Server:
        started.append(Server(cwd))
        started[-1].initialize()
        return started[-1]

    yield start
    for server in started:  # a server that hangs (a regression) must not outlive the test
        server.proc.kill()
        server.proc.wait()


def frame(message: dict[str, Any], length: int | None = None) -> bytes:
    body = json.dumps(message).encode()
    return f"Content-Length: {len(body) if length is None else length}\r\n\r\n".encode() + body


NOTIFICATION = b'{"jsonrpc":"2.0","method":"$/x"}'  # 32 bytes
LYING_FRAMES = {
    "too-short": b"Content-Length: 5\r\n\r\n" + NOTIFICATION,
    "too-long": b"Content-Length: 1000\r\n\r\n" + NOTIFICATION,
}


def test_server_answers_after_each_frame_that_lies_about_its_length(
    tmp_path: Path, servers: Callable[[Path], Server]
) -> None:
    """Each lie in turn, in one session (starting a server is most of such a test's time):
    after each, the server warns and answers the next request; then it ends cleanly."""
    server = servers(tmp_path)
    for name, bad in LYING_FRAMES.items():
        before = len(server.notes)
        server.send(bad)
        symbols = server.request("textDocument/documentSymbol", {"textDocument": {"uri": "x"}})
        assert "result" in symbols or "error" in symbols, name
        warned = [
            n["params"]["message"]
            for n in server.notes[before:]
            if n["method"] == "window/logMessage"
        ]
        assert any("not a valid frame" in w for w in warned), (name, server.notes)
    assert server.request("shutdown") == {"jsonrpc": "2.0", "id": server.ids, "result": None}
    code, log = server.exit()
    assert code == 0, log
    assert log.count("not a valid frame") >= len(LYING_FRAMES), log


def test_exit_without_shutdown_ends_the_server_with_1(
    tmp_path: Path, servers: Callable[[Path], Server]
) -> None:
    code, log = servers(tmp_path).exit()
    assert code == 1, log


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16], ids=["bytewise", "in-sevens", "whole"])
def test_frames_recover_from_lies_and_never_drop_a_valid_frame(chunk: int) -> None:
    """A valid body may quote a header (a spec's comment about LSP): it is read as sent."""
    quoting = {"jsonrpc": "2.0", "method": "m", "params": {"text": "Content-Length: 5\r\n\r\n"}}
    good = frame(quoting)
    stream = (
        good
        + LYING_FRAMES["too-short"]
        + b"\r\n"  # stray blank line: harmless
        + good
        + LYING_FRAMES["too-long"]
        + good
        + b"garbage\r\n\r\n"
        + good
    )
    frames = Frames()
    out: list[Any] = []
    for i in range(0, len(stream), chunk):
        out += frames.feed(stream[i : i + chunk])
    assert frames.close() is None
    kinds = ["drop" if isinstance(o, Dropped) else "msg" for o in out]
    assert kinds == ["msg", "drop", "msg", "drop", "msg", "drop", "msg"]
    assert all(o == quoting for o in out if not isinstance(o, Dropped))
    assert "not JSON" in out[1].reason and "the next frame starts after 32" in out[3].reason


def test_an_incomplete_frame_at_the_end_of_the_stream_is_reported() -> None:
    frames = Frames()
    assert frames.feed(LYING_FRAMES["too-long"]) == []
    left = frames.close()
    assert left is not None and left.size == len(LYING_FRAMES["too-long"])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "seqc.toml").write_text("")
    return tmp_path


def test_server_refuses_an_imported_pipe_and_never_reads_one(
    project: Path, pipe: Path, servers: Callable[[Path], Server]
) -> None:
    """main imports a.seq, which imports bad.seq (an error) and then the pipe: the error is
    shown at main's import, and the search for that import line does not open the pipe."""
    (project / "a.seq").write_text('seqc 1\nimport "bad.seq"\nimport "pipe.seq"\n')
    (project / "bad.seq").write_text("seqc 1\nlayr X() {}\n")
    server = servers(project)
    main = server.open(project / "main.seq", 'seqc 1\nimport "a.seq"\n')
    [diag] = server.diagnostics(main)
    assert diag["code"] == "unexpected-token" and diag["range"]["start"]["line"] == 1
    piped = server.open(project / "piped.seq", 'seqc 1\nimport "pipe.seq"\n')
    [diag] = server.diagnostics(piped)
    assert diag["code"] == "not-a-file" and diag["range"]["start"] == {"line": 1, "character": 0}
    assert "named pipe" in diag["message"]
    for device in (pipe, Path("/dev/zero")):  # a buffer's text comes from the editor, not disk
        assert server.diagnostics(server.open(device, "seqc 1\n")) == []
    server.request("shutdown")
    assert server.exit()[0] == 0


def test_import_completion_does_not_offer_the_file_itself(
    project: Path, servers: Callable[[Path], Server]
) -> None:
    (project / "main.seq").write_text("seqc 1\n")
    (project / "other.seq").write_text("seqc 1\n")
    server = servers(project)
    text = 'seqc 1\nimport "'
    uri = server.open(project / "main.seq", text)
    answer = server.request(
        "textDocument/completion",
        {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 8}},
    )
    labels = {item["label"] for item in answer["result"]["items"]}
    assert "other.seq" in labels and "main.seq" not in labels
    server.request("shutdown")
    assert server.exit()[0] == 0


def test_completion_leaves_out_the_file_by_any_path(project: Path) -> None:
    (project / "main.seq").write_text("seqc 1\n")
    (project / "link.seq").symlink_to(project / "main.seq")
    (project / "other.seq").write_text("seqc 1\n")
    text = 'seqc 1\nimport "'
    items = complete(text, len(text), project / "main.seq", Analysis(), None).items
    assert {i.label for i in items} == {"../", "other.seq"}


# ------------------------------------------------------------------------ printable text


def caret_points_at(rendered: str) -> str:
    """The character of the excerpt line that the first caret stands under."""
    lines = rendered.splitlines()
    at = next(i for i, line in enumerate(lines) if line.rstrip().endswith("^"))
    return lines[at - 1][lines[at].index("^")]


def test_printable_escapes_controls_and_bidi_and_keeps_the_rest() -> None:
    unsafe = [*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0))]
    unsafe += ["\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F))]
    unsafe += [*map(chr, range(0x2066, 0x206A)), "\u2028", "\u2029"]
    for c in unsafe:
        shown = printable(f"a{c}b")
        assert c not in shown and shown.startswith("a\\") and shown.endswith("b"), repr(c)
    assert printable("\x1b[2J") == "\\x1b[2J" and printable("\u202e") == "\\u202e"
    assert printable("one\ntwo\r", lines=True) == "one\ntwo\\r"
    kept = "café 中文 😀 👩\u200d💻 `[bold]` :smile: \\x1b"
    assert printable(kept) == kept


def test_every_field_of_an_error_is_printable() -> None:
    path = "dir\x1b[2J/e\u202evil.seq"
    line = 'x = "\x1b[31m\u202e\x07" + ybad'
    remember_source(path, f"seqc 1\n{line}\n")
    col = line.index("ybad") + 1
    span = Span(file=path, line=2, col=col, end_line=2, end_col=col + 4)
    err = CheckError(
        "bad \x1b[2J\u202e value",
        span=span,
        code="c",
        expected="\x1b]0;title\x07 \u2066",
        found='string "\x1b\r\nhint: forged"',
        suggestion="\u202eyb",
        hint="h\x9b\u200f",
        notes=[Note(span, "note \x1b[1m\u2067")],
        path=path,
    )
    rendered = err.render()
    assert not UNSAFE.search(rendered), rendered
    assert rendered.startswith("dir\\x1b[2J/e\\u202evil.seq:2:")
    assert 'found:    string "\\x1b\\r\\nhint: forged"' in rendered
    assert not any(row.startswith("hint: forged") for row in rendered.splitlines())
    assert 'x = "\\x1b[31m\\u202e\\x07" + ybad' in rendered
    assert caret_points_at(rendered) == "y"
    assert rendered.count("^^^^") == 2  # the note's excerpt lines up as well
    for text in (err.text(), *err.detail_lines(), diagnostics.message(err)):
        assert not UNSAFE.search(text), text
    unplaced = FileError("cannot read \x1b[2J", path="\x1b]8;;x\x07.seq", code="c")
    assert not UNSAFE.search(unplaced.render()), unplaced.render()


def test_cli_shows_no_escape_code_or_bidi_override_from_a_spec(tmp_path: Path) -> None:
    spec = tmp_path / "evil.seq"
    spec.write_text(EVIL_SPEC)
    result = cli("check", spec)
    assert result.exit_code == 2, result.output
    assert not UNSAFE.search(result.output), result.output
    assert 'found:    string "\\u202e ... \\x1b[31mred\\x07\\x9b\\x7f"' in result.output
    assert caret_points_at(result.output) == '"'


def test_cli_prints_a_file_name_printable(tmp_path: Path) -> None:
    spec = tmp_path / "a\x1b[2Jb.seq"
    spec.write_text(SPEC)
    for args in (["check"], ["fmt", "--check"]):
        result = cli(args[0], spec, *args[1:])
        assert result.exit_code in (0, 1), result.output
        assert "a\\x1b[2Jb.seq" in result.output and "\x1b" not in result.output


def test_editor_diagnostics_are_printable(tmp_path: Path) -> None:
    path = tmp_path / "evil.seq"
    uri = path.as_uri()
    workspace = Workspace(tmp_path.as_uri())
    workspace.put_text_document(
        types.TextDocumentItem(uri=uri, language_id="seq", version=1, text=EVIL_SPEC)
    )
    [diag] = diagnostics.check(uri, workspace).diagnostics[uri]
    assert diag.code == "wrong-type"
    assert not UNSAFE.search(diag.message), diag.message
    assert "\\u202e ... \\x1b[31mred" in diag.message
