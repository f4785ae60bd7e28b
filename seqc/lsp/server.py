"""The server: pygls over stdio, each LSP feature wired to its module, and the error net.

No input may stop the server. Every handler runs inside `_guarded`: an exception (a bug in
seqc, a RecursionError from text nested thousands deep) becomes an Error line in the client's
log (`window/logMessage`) and an empty answer, and the next request is served as usual. Spec
errors are not exceptions here: they are diagnostics.

Checks run on open, change and save, on the buffer's text; a buffer that imports one that
changed is checked again too, so an edit in `common/transformer.seq` shows up at once in the
spec that uses it. Changes are debounced: a check runs `DEBOUNCE_S` after the last keystroke of
a burst, not once per keystroke, so a fast typist on a large program never queues checks behind
each other; a request about any buffer (hover, completion, ...) first runs the checks still
pending, so its answer sees the text the editor sent before it.

The stream is read by `framing.Frames`, not pygls's reader: a frame whose `Content-Length` lies
is dropped with a warning in the log and the frames after it are read as sent (pygls would
never read another). `exit` ends the process with the code the LSP asks for: 0 after
`shutdown`, 1 without it (also when the stream ends without one).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

from seqc.lsp import completion, diagnostics, formatting, framing, hover, navigation
from seqc.lsp.documents import Analysis, Lines, resolved
from seqc.spec.printable import printable

NAME = "seqc"
DEBOUNCE_S = 0.2
"""How long after a change the check runs, unless another change comes first."""
log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


class SeqcServer(LanguageServer):
    """The language server, with what it knows about each open buffer."""

    def __init__(self) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            ver = version("seqc")
        except PackageNotFoundError:
            ver = "0"
        super().__init__(NAME, ver, text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.analyses: dict[str, Analysis] = {}
        self.publisher = diagnostics.Publisher()
        self.pending: dict[str, asyncio.TimerHandle] = {}
        """Buffers changed since their last check, with the timer that will check them."""
        self.shut_down = False
        """Whether the client sent `shutdown` (then `exit`, or the end of the stream, is 0)."""
        self.exit_code = 0

    def log_error(self, what: str, detail: str) -> None:
        """Tell the client's log what failed; never raise (the client may be gone). Both may
        quote a spec (a URI, an exception's message): `printable`, as everything shown."""
        what, detail = printable(what, lines=True), printable(detail, lines=True)
        log.error("%s\n%s", what, detail)
        self._log_message(types.MessageType.Error, f"{what}\n{detail}")

    def log_warning(self, what: str) -> None:
        """Tell the client's log (and stderr) of something the server recovered from."""
        what = printable(what, lines=True)
        log.warning("%s", what)
        self._log_message(types.MessageType.Warning, what)

    def _log_message(self, kind: types.MessageType, text: str) -> None:
        with contextlib.suppress(Exception):  # the log is best effort
            self.window_log_message(types.LogMessageParams(type=kind, message=text))

    # ---------------------------------------------------------------- the stream
    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """Serve over stdio until `exit` or the end of input; `exit_code` says how it ended."""
        self._stop_event = threading.Event()  # pygls's: its `shutdown()` sets it
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        try:
            self.exit_code = asyncio.run(self._serve((stdin or sys.stdin.buffer).fileno()))
        except BrokenPipeError:
            log.error("the connection to the client is lost")
            self.exit_code = 1
        finally:
            self.shutdown()

    async def _serve(self, fd: int) -> int:
        """Read the stream (on a thread: a read of a pipe blocks) into `framing.Frames` and
        handle each message as pygls's own loop would."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[bytes] = asyncio.Queue()

        def pump() -> None:
            while True:
                try:
                    data = os.read(fd, 1 << 16)
                except OSError:
                    data = b""
                try:
                    loop.call_soon_threadsafe(chunks.put_nowait, data)
                except RuntimeError:  # the loop is closed: the server has exited
                    return
                if not data:  # the end of the stream, told to the loop
                    return

        # a daemon: it may be blocked in a read when `exit` comes, and must not hold the exit
        threading.Thread(target=pump, name="seqc-lsp-stdin", daemon=True).start()
        frames = framing.Frames(self._decode)
        while self._stop_event is not None and not self._stop_event.is_set():
            data = await chunks.get()
            if not data:
                break
            for item in frames.feed(data):
                code = self._take(item)
                if code is not None:
                    return code
        left = frames.close()
        if left is not None:
            self._dropped(left)
        return 0 if self.shut_down else 1

    def _decode(self, body: bytes) -> Any:
        return json.loads(body, object_hook=self.protocol.structure_message)

    def _take(self, item: Any) -> int | None:
        """Handle one item of the stream; the exit code once `exit` is handled."""
        if isinstance(item, framing.Dropped):
            self._dropped(item)
            return None
        if isinstance(item, framing.Unreadable):  # JSON, not a message: as pygls reports it
            self.report_server_error(item.error, JsonRpcException)
            return None
        try:
            self.protocol.handle_message(item)
        except SystemExit as e:  # pygls's `exit` handler: 0 after `shutdown`, else 1
            return e.code if isinstance(e.code, int) else 1
        except Exception as e:
            log.exception("cannot handle a message")
            self.report_server_error(e, JsonRpcException)
        return None

    def _dropped(self, item: framing.Dropped) -> None:
        self.log_warning(
            f"dropped {item.size:,} bytes of input that were not a valid frame "
            f"({item.reason}); reading goes on at the next frame"
        )

    # ---------------------------------------------------------------- buffers
    def text(self, uri: str) -> str:
        return self.workspace.get_text_document(uri).source

    def folder(self, uri: str) -> Path:
        return diagnostics.root_path(uri).parent

    def analysis(self, uri: str) -> Analysis:
        return self.analyses.get(uri) or Analysis()

    def check(self, uri: str) -> None:
        """Check one buffer and publish what it found, merged with other buffers' checks."""
        outcome = diagnostics.check(uri, self.workspace, self.analyses.get(uri))
        self.analyses[uri] = outcome.analysis
        if outcome.internal:
            self.log_error(f"internal error checking {uri}", outcome.internal)
        self._publish(self.publisher.update(uri, outcome.diagnostics))

    def check_with_dependents(self, uri: str) -> None:
        """Check a buffer, then every other open buffer whose program read its file."""
        self.check(uri)
        key = resolved(diagnostics.root_path(uri))
        for other in list(self.workspace.text_documents):
            if other != uri and other in self.analyses and key in self.analyses[other].files:
                _guarded_call(self, f"checking {other}", self.check, other)

    def check_later(self, uri: str) -> None:
        """Check the buffer `DEBOUNCE_S` from now, replacing a check already waiting."""
        self.cancel(uri)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not called from the server's loop: no timer to wait on
            self.check_with_dependents(uri)
            return
        self.pending[uri] = loop.call_later(DEBOUNCE_S, self._check_pending, uri)

    def check_now(self, uri: str) -> None:
        self.cancel(uri)
        self.check_with_dependents(uri)

    def cancel(self, uri: str) -> None:
        handle = self.pending.pop(uri, None)
        if handle is not None:
            handle.cancel()

    def flush(self) -> None:
        """Run every pending check now (before a request, so it answers about fresh text)."""
        for uri in list(self.pending):
            self.cancel(uri)
            _guarded_call(self, f"checking {uri}", self.check_with_dependents, uri)

    def _check_pending(self, uri: str) -> None:
        self.pending.pop(uri, None)
        _guarded_call(self, f"checking {uri}", self.check_with_dependents, uri)

    def close(self, uri: str) -> None:
        self.cancel(uri)
        self.analyses.pop(uri, None)
        self._publish(self.publisher.drop(uri))

    def _publish(self, targets: list[str]) -> None:
        for target in dict.fromkeys(targets):
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(
                    uri=target, diagnostics=self.publisher.merged(target)
                )
            )


def _guarded_call(server: SeqcServer, what: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as e:  # RecursionError included: log it, keep serving
        server.log_error(f"seqc lsp: {what} failed: {type(e).__name__}: {e}", _trace(e))
        return None


def _trace(e: BaseException) -> str:
    """The traceback, cut short: a RecursionError's runs to a thousand frames."""
    lines = traceback.format_exception(e)
    return "".join(lines[:20] + (["...\n"] if len(lines) > 40 else []) + lines[-20:])


def _guarded(what: str, request: bool = True) -> Callable[[F], F]:
    """A handler whose exceptions are logged and answered with None. A `request` first runs
    the checks that changes left pending."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def handler(server: SeqcServer, params: Any) -> Any:
            if request:
                server.flush()
            return _guarded_call(server, what, fn, server, params)

        return handler  # type: ignore[return-value]

    return wrap


server = SeqcServer()


@server.feature(types.SHUTDOWN)
def on_shutdown(ls: SeqcServer, params: None) -> None:
    ls.shut_down = True


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
@_guarded("didOpen/didSave", request=False)
def did_open_or_save(
    ls: SeqcServer, params: types.DidOpenTextDocumentParams | types.DidSaveTextDocumentParams
) -> None:
    ls.check_now(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
@_guarded("didChange", request=False)
def did_change(ls: SeqcServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.check_later(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
@_guarded("didClose", request=False)
def did_close(ls: SeqcServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.close(params.text_document.uri)


def _offset(ls: SeqcServer, uri: str, pos: types.Position) -> tuple[str, int]:
    text = ls.text(uri)
    return text, Lines(text, ls.workspace.position_encoding).offset(pos)


@server.feature(types.TEXT_DOCUMENT_HOVER)
@_guarded("hover")
def on_hover(ls: SeqcServer, params: types.HoverParams) -> types.Hover | None:
    uri = params.text_document.uri
    text, offset = _offset(ls, uri, params.position)
    return hover.hover(text, offset, ls.analysis(uri), ls.workspace.position_encoding)


@server.feature(
    types.TEXT_DOCUMENT_COMPLETION,
    types.CompletionOptions(trigger_characters=[".", "(", ",", '"', "/", " "]),
)
@_guarded("completion")
def on_completion(ls: SeqcServer, params: types.CompletionParams) -> types.CompletionList:
    uri = params.text_document.uri
    text, offset = _offset(ls, uri, params.position)
    return completion.complete(
        text, offset, diagnostics.root_path(uri), ls.analysis(uri), ls.workspace.position_encoding
    )


@server.feature(types.TEXT_DOCUMENT_DEFINITION)
@_guarded("definition")
def on_definition(ls: SeqcServer, params: types.DefinitionParams) -> types.Location | None:
    uri = params.text_document.uri
    text, offset = _offset(ls, uri, params.position)
    return navigation.definition(text, offset, ls.folder(uri), ls.analysis(uri), ls.workspace)


@server.feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
@_guarded("documentSymbol")
def on_symbols(ls: SeqcServer, params: types.DocumentSymbolParams) -> list:
    uri = params.text_document.uri
    path = diagnostics.root_path(uri)
    return navigation.symbols(ls.text(uri), str(path), ls.workspace.position_encoding)


@server.feature(types.TEXT_DOCUMENT_FORMATTING)
@_guarded("formatting")
def on_formatting(ls: SeqcServer, params: types.DocumentFormattingParams) -> list:
    uri = params.text_document.uri
    path = diagnostics.root_path(uri)
    return formatting.format_document(ls.text(uri), str(path), ls.workspace.position_encoding)


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
)
@_guarded("codeAction")
def on_code_action(ls: SeqcServer, params: types.CodeActionParams) -> list:
    uri = params.text_document.uri
    return diagnostics.quick_fixes(uri, ls.text(uri), params, ls.workspace.position_encoding)


def serve() -> None:
    """Serve LSP over stdin and stdout until the client says exit; end the process with the
    code the LSP asks for (1 for an `exit` without `shutdown`)."""
    logging.basicConfig(level=logging.WARNING, format="seqc lsp: %(levelname)s %(message)s")
    server.start_io()
    if server.exit_code:
        sys.exit(server.exit_code)
