"""The editor files ship in working order: the TextMate grammar is JSON whose regexes compile,
and it knows every keyword of `grammar.lark`."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EDITORS = ROOT / "editors"


def _regexes(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [
            v for k, v in node.items() if k in ("match", "begin", "end") and isinstance(v, str)
        ]
        return found + [r for v in node.values() for r in _regexes(v)]
    if isinstance(node, list):
        return [r for v in node for r in _regexes(v)]
    return []


def test_textmate_grammar_is_json_with_compiling_regexes() -> None:
    grammar = json.loads((EDITORS / "vscode" / "syntaxes" / "seq.tmLanguage.json").read_text())
    assert grammar["scopeName"] == "source.seq"
    patterns = _regexes(grammar)
    assert len(patterns) > 10
    for pattern in patterns:
        re.compile(pattern)  # Oniguruma's syntax, as far as Python's shares it


def test_textmate_grammar_covers_the_keywords_of_the_language() -> None:
    lark = (ROOT / "seqc" / "spec" / "grammar.lark").read_text()
    keywords = set(re.findall(r'"([a-z]+)"', lark))
    text = (EDITORS / "vscode" / "syntaxes" / "seq.tmLanguage.json").read_text()
    missing = sorted(k for k in keywords if not re.search(rf"\b{k}\b", text))
    assert not missing, missing


def test_editor_configs_name_the_server() -> None:
    assert json.loads((EDITORS / "vscode" / "package.json").read_text())["contributes"]
    assert '"lsp"' in (EDITORS / "vscode" / "settings.json").read_text()
    assert '"seqc", "lsp"' in (EDITORS / "neovim" / "seqc.lua").read_text()
    assert 'args = ["lsp"]' in (EDITORS / "helix" / "languages.toml").read_text()
