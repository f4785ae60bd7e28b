"""`seqc lsp` driven as an editor drives it: the real server in a subprocess, over stdio.

One server serves the whole module (starting one costs a second); each test opens its own
buffers. Handlers run in order and a request first runs the checks that changes left pending
(they are debounced), so once a request is answered, the diagnostics published for the
notifications sent before it have arrived (`settle`).
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from seqc.lsp.server import DEBOUNCE_S

pytestmark = pytest.mark.asyncio(loop_scope="module")

LIMIT_S = 60
"""No test waits on the server longer than this: a hang fails instead of stalling the suite."""


def bounded(test: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    @functools.wraps(test)
    async def run(*args: Any, **kwargs: Any) -> None:
        await asyncio.wait_for(test(*args, **kwargs), LIMIT_S)

    return run


BLOCKS = """seqc 1

layer Block(d: int, heads: int = 2 "attention heads") {
  "A pre-norm attention block."
  norm = LayerNorm(d)
  attn = SelfAttention(d, heads)
  forward (x: float32[B, T, d]) -> float32[B, T, d] {
    return x + attn(norm(x))
  }
}
"""

MAIN = """seqc 1

import "common/blocks.seq"

input chars {
  train = text("train.txt")
  tokenizer = chars()
}

model Tiny(vocab: int, d: int = 64) {
  embed = Embedding(vocab, d)
  block = Block(d, heads = 2)
  norm = LayerNorm(d)
  out = Softmax(vocab, d)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {
    return out(norm(block(embed(ids))))
  }
}

task lm {
  input = chars
  model = Tiny(vocab = 100)
}

experiment base {
  tasks = [lm]
  train {
    optimizer = adam(lr = 1e-3)
    steps = 100
  }
}

experiment big extends base {
  lm.model.d = 128
  train.steps = 200
}
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A spec project: a root spec importing a layer from `common/`."""
    root = tmp_path_factory.mktemp("lsp")
    (root / "seqc.toml").write_text("")
    (root / "common").mkdir()
    (root / "common" / "blocks.seq").write_text(BLOCKS)
    (root / "main.seq").write_text(MAIN)
    return root


@pytest_lsp.fixture(
    scope="module",
    config=ClientServerConfig(server_command=[sys.executable, "-m", "seqc.cli", "lsp"]),
)
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("visual-studio-code"))
    )
    yield
    await lsp_client.shutdown_session()


# ------------------------------------------------------------------------------------ helpers


def uri(path: Path) -> str:
    return path.resolve().as_uri()


def open_doc(client: LanguageClient, path: Path, text: str, version: int = 1) -> str:
    u = uri(path)
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=u, language_id="seq", version=version, text=text
            )
        )
    )
    return u


def replace_all(client: LanguageClient, u: str, text: str, version: int) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=u, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def close_doc(client: LanguageClient, u: str) -> None:
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=u))
    )


async def settle(client: LanguageClient, u: str) -> list[types.Diagnostic]:
    """Wait for the server to finish what was sent; the diagnostics of `u` then."""
    await client.text_document_document_symbol_async(
        types.DocumentSymbolParams(text_document=types.TextDocumentIdentifier(uri=u))
    )
    return list(client.diagnostics.get(u, []))


def position(text: str, needle: str, delta: int = 0) -> types.Position:
    """The position of `needle` in `text` (plus `delta` characters; ASCII texts only)."""
    off = text.index(needle) + delta
    line = text.count("\n", 0, off)
    return types.Position(line=line, character=off - (text.rfind("\n", 0, off) + 1))


async def hover_text(client: LanguageClient, u: str, text: str, needle: str, delta: int = 1):
    h = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=u),
            position=position(text, needle, delta),
        )
    )
    assert h is not None, needle
    assert isinstance(h.contents, types.MarkupContent)
    return h.contents.value


async def completions(client: LanguageClient, path: Path, text: str) -> list[str]:
    """Labels offered at the `|` in `text`, typed into buffer `path` that held `MAIN` (text
    being typed rarely parses: what the last good version declared still counts)."""
    at = position(text, "|")
    u = open_doc(client, path, MAIN)
    await settle(client, u)
    replace_all(client, u, text.replace("|", "", 1), 2)
    result = await client.text_document_completion_async(
        types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=u), position=at)
    )
    close_doc(client, u)
    assert isinstance(result, types.CompletionList)
    return [item.label for item in result.items]


# ------------------------------------------------------------------------------------ diagnostics


@bounded
async def test_diagnostics_follow_the_buffer_with_code_range_and_quick_fix(client, project):
    path = project / "main.seq"
    u = open_doc(client, path, MAIN)
    assert await settle(client, u) == []

    bad = MAIN.replace("  norm = LayerNorm(d)", "  norm = LayerNrom(d)")  # unsaved edit
    replace_all(client, u, bad, 2)
    [diag] = await settle(client, u)
    assert diag.code == "unknown-kind"
    assert diag.source == "seqc"
    start = position(bad, "LayerNrom")
    assert diag.range == types.Range(
        start=start, end=types.Position(line=start.line, character=start.character + 9)
    )
    assert "did you mean `LayerNorm`?" in diag.message

    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=u),
            range=diag.range,
            context=types.CodeActionContext(diagnostics=[diag]),
        )
    )
    [fix] = actions
    assert fix.kind == types.CodeActionKind.QuickFix
    [edit] = fix.edit.changes[u]
    assert edit.new_text == "LayerNorm" and edit.range == diag.range

    # A misspelt field: the error covers the statement, the fix only the word.
    bad2 = MAIN.replace("    steps = 100", "    stpes = 100")
    replace_all(client, u, bad2, 3)
    [diag] = await settle(client, u)
    assert diag.code == "unknown-field"
    [fix] = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=u),
            range=diag.range,
            context=types.CodeActionContext(diagnostics=[diag]),
        )
    )
    [edit] = fix.edit.changes[u]
    assert edit.new_text == "steps"
    assert edit.range.start == position(bad2, "stpes")

    replace_all(client, u, MAIN, 4)
    assert await settle(client, u) == []
    close_doc(client, u)


@bounded
async def test_a_burst_of_changes_is_checked_once_after_it(client, project):
    """Typing: thirty changes in a burst publish one check, of the last text, by the timer
    alone (no request comes to flush it)."""
    u = open_doc(client, project / "burst.seq", MAIN)
    assert await settle(client, u) == []
    published: list[int] = []

    class Counting(dict):
        def __setitem__(self, key: str, value: Any) -> None:
            if key == u:
                published.append(len(value))
            super().__setitem__(key, value)

    client.diagnostics = Counting(client.diagnostics)
    for version in range(2, 32):
        replace_all(client, u, MAIN.replace("LayerNorm(d)", f"LayerNorm{version}(d)", 1), version)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not published and loop.time() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(5 * DEBOUNCE_S)  # time for any further check to arrive
    [diag] = client.diagnostics[u]
    assert diag.code == "unknown-kind" and "LayerNorm31" in diag.message
    assert 1 <= len(published) <= 3, published  # one, unless the machine stalled mid-burst
    close_doc(client, u)


@bounded
async def test_unsaved_imported_buffer_is_checked_and_its_error_shown_in_both_files(
    client, project
):
    main_u = open_doc(client, project / "main.seq", MAIN)
    blocks_u = open_doc(client, project / "common" / "blocks.seq", BLOCKS)
    assert await settle(client, main_u) == []

    broken = BLOCKS.replace("SelfAttention(d, heads)", "SelfAttention(d, heads, dropout = true)")
    replace_all(client, blocks_u, broken, 2)  # not saved: the disk still has the good text
    await settle(client, blocks_u)
    [in_blocks] = client.diagnostics[blocks_u]
    assert in_blocks.range.start.line == 5
    [in_main] = client.diagnostics[main_u]
    assert in_main.range.start == position(MAIN, 'import "common/blocks.seq"')
    assert "imported file" in in_main.message

    replace_all(client, blocks_u, BLOCKS, 3)
    await settle(client, blocks_u)
    assert not client.diagnostics[blocks_u] and not client.diagnostics[main_u]
    close_doc(client, blocks_u)
    close_doc(client, main_u)


# ------------------------------------------------------------------------------------ hover


@bounded
async def test_hover_kinds_params_fields_layers_and_experiments(client, project):
    u = open_doc(client, project / "main.seq", MAIN)
    await settle(client, u)

    kind = await hover_text(client, u, MAIN, "Embedding(")
    assert "Embedding(vocab, d)" in kind and "| `init_scale` |" in kind

    param = await hover_text(client, u, MAIN, "lr = 1e-3")
    assert "param of `adam`" in param and "default: `0.001`" in param
    assert "train.optimizer.lr = 0.001  # " in param and "main.seq:28:" in param

    field = await hover_text(client, u, MAIN, "steps = 100")
    assert "field of `train { }`" in field and "Number of optimizer updates." in field

    override = await hover_text(client, u, MAIN, "train.steps = 200", 7)
    assert "In `big`" in override and "train.steps = 200  # " in override

    user_param = await hover_text(client, u, MAIN, "heads = 2")
    assert 'heads: int = 2 "attention heads"' in user_param and "param of `Block`" in user_param

    layer = await hover_text(client, u, MAIN, "Block(d")
    assert "layer Block(" in layer and "blocks.seq:3:1" in layer

    experiment = await hover_text(client, u, MAIN, "extends base", 9)
    assert "experiment base" in experiment
    assert "train.steps" in experiment and "= 100  # " in experiment
    assert "backend" in experiment and "# default" in experiment
    close_doc(client, u)


# ------------------------------------------------------------------------------------ completion


@bounded
async def test_completion_of_kinds_params_fields_extends_and_imports(client, project):
    path = project / "edit.seq"
    kinds = await completions(client, path, MAIN.replace("norm = LayerNorm(d)", "norm = Lay|"))
    assert "LayerNorm" in kinds and "Block" in kinds and "adam" not in kinds

    params = await completions(client, path, MAIN.replace("adam(lr = 1e-3)", "adam(lr = 1e-3, |)"))
    assert "beta1" in params and "lr" not in params

    user = await completions(client, path, MAIN.replace("Block(d, heads = 2)", "Block(d, |)"))
    assert user == ["heads"]

    fields = await completions(client, path, MAIN.replace("    steps = 100", "    st|"))
    assert "steps" in fields and "checkpoint_every" in fields

    dotted = await completions(client, path, MAIN.replace("  train.steps = 200", "  train.|"))
    assert "steps" in dotted

    optimizers = await completions(client, path, MAIN.replace("= adam(lr = 1e-3)", "= |"))
    assert {"adam", "sgd", "adamw"} <= set(optimizers)

    parents = await completions(client, path, MAIN.replace("extends base", "extends |"))
    assert parents == ["base"]

    files = await completions(client, path, MAIN.replace('"common/blocks.seq"', '"common/|'))
    assert files == ["blocks.seq"]
    folders = await completions(client, path, MAIN.replace('"common/blocks.seq"', '"|'))
    assert "common/" in folders and "main.seq" in folders


# ------------------------------------------------------------------------------------ navigation


@bounded
async def test_definition_across_imports_and_of_extends(client, project):
    u = open_doc(client, project / "main.seq", MAIN)
    await settle(client, u)

    async def goto(needle: str, delta: int = 1) -> types.Location:
        found = await client.text_document_definition_async(
            types.DefinitionParams(
                text_document=types.TextDocumentIdentifier(uri=u),
                position=position(MAIN, needle, delta),
            )
        )
        assert isinstance(found, types.Location), needle
        return found

    layer = await goto("Block(d")
    assert layer.uri == uri(project / "common" / "blocks.seq")
    assert layer.range.start == types.Position(line=2, character=0)

    imported = await goto('"common/blocks.seq"', 3)
    assert imported.uri == uri(project / "common" / "blocks.seq")

    parent = await goto("extends base", 9)
    assert parent.uri == u and parent.range.start == position(MAIN, "experiment base")

    task = await goto("tasks = [lm]", 10)
    assert task.range.start == position(MAIN, "task lm")
    close_doc(client, u)


@bounded
async def test_document_symbols(client, project):
    u = open_doc(client, project / "main.seq", MAIN)
    found = await client.text_document_document_symbol_async(
        types.DocumentSymbolParams(text_document=types.TextDocumentIdentifier(uri=u))
    )
    names = [(s.name, s.kind) for s in found]
    assert names == [
        ("chars", types.SymbolKind.Struct),
        ("Tiny", types.SymbolKind.Class),
        ("lm", types.SymbolKind.Function),
        ("base", types.SymbolKind.Module),
        ("big", types.SymbolKind.Module),
    ]
    tiny = found[1]
    assert [c.name for c in tiny.children] == [
        "vocab",
        "d",
        "embed",
        "block",
        "norm",
        "out",
        "forward",
    ]
    assert tiny.selection_range.start == position(MAIN, "Tiny")
    close_doc(client, u)


# ------------------------------------------------------------------------------------ formatting


@bounded
async def test_formatting_is_seqc_fmt_and_leaves_broken_text_alone(client, project):
    messy = "seqc 1\ntask t {input=x\n  model   = M( vocab=3 )   # keep me\n}\n"
    u = open_doc(client, project / "fmt.seq", messy)

    async def fmt() -> list[types.TextEdit]:
        return await client.text_document_formatting_async(
            types.DocumentFormattingParams(
                text_document=types.TextDocumentIdentifier(uri=u),
                options=types.FormattingOptions(tab_size=2, insert_spaces=True),
            )
        )

    [edit] = await fmt()
    assert (
        edit.new_text == "seqc 1\n\ntask t {\n  input = x\n  model = M(vocab = 3)  # keep me\n}\n"
    )
    replace_all(client, u, edit.new_text, 2)
    assert not await fmt()
    replace_all(client, u, "seqc 1\ntask t {", 3)
    assert not await fmt()
    close_doc(client, u)


# ------------------------------------------------------------------------------------ robustness


@bounded
async def test_server_survives_hostile_text_and_keeps_answering(client, project):
    path = project / "hostile.seq"
    deep = "seqc 1\ntask t { x = " + "(" * 5000 + "1" + ")" * 5000 + " }\n"
    huge = "seqc 1\ntask t { x = " + "9" * 100_000 + " }\n"
    noise = "seqc 1\n" + "".join(chr(c) for c in range(1, 0x800, 7)) + "\x00\ufffd\udc80{(["
    power = "seqc 1\nexperiment e { tasks = [t]\n train.steps = 9 ** 9 ** 9 }\n"
    u = open_doc(client, path, deep)
    for version, text in enumerate([deep, huge, noise, power], start=1):
        replace_all(client, u, text, version + 1)
        diags = await settle(client, u)
        assert diags and all(d.severity == types.DiagnosticSeverity.Error for d in diags), text[:40]
        for request in (
            client.text_document_hover_async(
                types.HoverParams(
                    text_document=types.TextDocumentIdentifier(uri=u),
                    position=types.Position(line=1, character=12),
                )
            ),
            client.text_document_completion_async(
                types.CompletionParams(
                    text_document=types.TextDocumentIdentifier(uri=u),
                    position=types.Position(line=1, character=3000),
                )
            ),
            client.text_document_formatting_async(
                types.DocumentFormattingParams(
                    text_document=types.TextDocumentIdentifier(uri=u),
                    options=types.FormattingOptions(tab_size=2, insert_spaces=True),
                )
            ),
        ):
            await request  # answered (None or a value), not an error

    # An import of a file that is not UTF-8 on disk: a located error at the import line.
    (project / "binary.seq").write_bytes(b"seqc 1\n\xff\xfe\x00garbage")
    replace_all(client, u, 'seqc 1\nimport "binary.seq"\n', 10)
    [diag] = await settle(client, u)
    assert diag.code == "not-utf8" and diag.range.start.line == 1
    close_doc(client, u)

    failures = [m.message for m in client.log_messages if m.type == types.MessageType.Error]
    assert not failures, failures[0][:2000]

    # Still serving: a fresh buffer gets its hover.
    main = open_doc(client, project / "main.seq", MAIN)
    await settle(client, main)
    assert "Embedding" in await hover_text(client, main, MAIN, "Embedding(")
    close_doc(client, main)
