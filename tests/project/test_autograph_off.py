"""Every `tf.function` in seqc, its tests and its benches is traced without AutoGraph
(`autograph=False`).

Why: the backend interprets the op graph in plain Python and writes each loop and branch that
depends on a tensor as `tf.while_loop` or `tf.cond` itself (`seqc/backends/tf/scan.py`,
`decode.py`). AutoGraph would parse and rewrite that Python, function by function, at every
trace, for nothing: it was about half of the CPU a TF training process spends after importing
TensorFlow (a tiny LM's 20 steps: 16-18 CPU-s with it, 10-12 without, the same losses; see
docs/results.md, "The test suite"). A new `tf.function` without it would bring the cost back
unnoticed, so this reads the source. The tests' and benches' own `tf.function`s around the
backend's code pay the same for nothing (a MoE test: 5 of its 8.6 CPU-s), and would measure
another cost than a user's.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("seqc", "tests", "bench")


def _is_tf_function(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "function"
        and isinstance(node.value, ast.Name)
        and node.value.id == "tf"
    )


def _autograph_off(keywords: list[ast.keyword]) -> bool:
    return any(
        k.arg == "autograph" and isinstance(k.value, ast.Constant) and k.value.value is False
        for k in keywords
    )


def _unguarded(path: Path) -> list[str]:
    """`file:line` of each `tf.function` in `path` traced with AutoGraph on: every mention of
    `tf.function` must be called with `autograph=False`, or handed with it to a call
    (`functools.partial(tf.function, autograph=False, ...)`); a bare `@tf.function` is not."""
    tree = ast.parse(path.read_text(), str(path))
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _autograph_off(node.keywords):
            guarded.update(id(n) for n in (node.func, *node.args[:1]) if _is_tf_function(n))
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for node in ast.walk(tree)
        if _is_tf_function(node) and id(node) not in guarded
    ]


def test_every_tf_function_is_traced_without_autograph() -> None:
    sources = sorted(p for folder in SOURCES for p in (ROOT / folder).rglob("*.py"))
    assert sources
    unguarded = [where for path in sources for where in _unguarded(path)]
    assert not unguarded, f"tf.function without autograph=False at {', '.join(unguarded)}"
