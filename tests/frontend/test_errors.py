"""Malformed specs and the exact errors they produce.

Why: errors are part of seqc's interface (see `seqc.spec.errors`). Each case below is a small
broken spec with the error a user must get for it: the phase, the stable code, and the line and
column the caret points at. The positions were counted by hand from the spec text, so a test
fails if a location drifts, not only if the error disappears. The tables read as a catalogue of
seqc's errors, one entry per error, grouped by the phase that finds them.

Each spec is written to `main.seq` in a fresh directory (other files of a case next to it), then
loaded and checked as `seqc check` does; `experiment` and `overrides` stand for `-e` and `--set`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest
from typer.testing import CliRunner

from seqc.cli import app
from seqc.compiler.check import check_program
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.spec.errors import SeqcError


class Case(NamedTuple):
    text: str  # main.seq
    phase: str
    code: str
    line: int | None  # None: the error has no span (a bad command-line argument)
    col: int | None
    suggestion: str | None = None  # the exact "did you mean", or None for none
    says: str | None = None  # a phrase the rendered message must contain
    file: str = "main.seq"  # the file the span is in
    note: tuple[str, int, int] | None = None  # (file, line, col) of the first note
    files: dict[str, str] | None = None  # other files next to main.seq
    experiment: str | None = None
    overrides: tuple[str, ...] = ()


def case(id: str, text: str, phase: str, code: str, line: int | None, col: int | None, **kw):
    """One row of a table; `text` is dedented, so it may be indented like the code around it."""
    files = {name: textwrap.dedent(t) for name, t in kw.pop("files", {}).items()}
    return pytest.param(
        Case(textwrap.dedent(text), phase, code, line, col, files=files, **kw), id=id
    )


# A valid input and model, used by the cases about tasks and experiments:
# MODEL is lines 1-6, LM adds a task on line 7, so an experiment appended to LM is on line 8.
MODEL = """\
seqc 1
input data { train = text("t.txt"); tokenizer = chars() }
model M(vocab: int, d: int = 8) {
  embed = Embedding(vocab, d)
  forward (ids: int32[B, T]) -> float32[B, T, d] { return embed(ids) }
}
"""
LM = MODEL + "task lm { input = data; model = M(vocab = input.vocab_size) }\n"

# A layer with one sub-layer `f` on line 3 and its forward on line 4, for the layer checks:
# in `  f = LayerNorm(d)` the call starts at column 7 and its first argument at column 17;
# in the forward line `{` is at column 47 and the returned expression starts at column 56.
FORWARD = "  forward (x: float32[B, d]) -> float32[B, d] { return f(x) }\n"


# A model whose attention heads are a model param (line 3: `d: int = 256` at column 30) and a
# repeated SelfAttention on line 4 (the call at column 27); its task is line 7, so an
# experiment appended to ATTN is on line 8 and `lm.model.heads = ` ends at column 46.
ATTN = """\
seqc 1
input data { train = text("t.txt"); tokenizer = chars() }
model M(vocab: int, d: int = 256, heads: int = 4, layers: int = 2) {
  blocks = repeat(layers) SelfAttention(d, heads)
  forward (x: float32[B, T, d]) -> float32[B, T, d] { return blocks(x) }
}
task lm { input = data; model = M(vocab = input.vocab_size) }
"""

# The head of an experiment appended to LM or ATTN (line 8): 29 columns.
EXP = "experiment e { tasks = [lm]; "
# A learning rate with one boundary; `values = ` ends at column 95 after EXP.
PIECEWISE = "train.optimizer = adam(lr = piecewise(boundaries = [10], values = {}))"


def after(base: str, text: str) -> str:
    """`base` followed by `text`, dedented on its own (the case table indents it)."""
    return base + textwrap.dedent(text)


def layer(sub: str, forward: str = FORWARD, params: str = "d: int") -> str:
    return f"seqc 1\nlayer Block({params}) {{\n  f = {sub}\n{forward}}}\n"


# ------------------------------------------------------------------------------------ parse

# The tables are laid out by hand, one case per entry, so they are kept out of the formatter.
# fmt: off
PARSE = [
    case("missing-header", """\
        input data {}
        """, "parse", "missing-header", 1, 1, says="add `seqc 1` as the first line"),
    case("missing-header-after-comment", """\
        # a spec that forgot its version

        input data {}
        """, "parse", "missing-header", 3, 1),
    case("bad-version", """\
        seqc 2
        """, "parse", "bad-version", 1, 1, says="found:    seqc 2"),
    case("bad-version-fraction", """\
        seqc 1.5
        """, "parse", "bad-version", 1, 1, says="found:    seqc 1.5"),
    case("unterminated-string-import", """\
        seqc 1
        import "common.seq
        """, "parse", "unterminated-string", 2, 8),
    case("unterminated-string-body", """\
        seqc 1
        input data {
          train = text("t.txt)
        }
        """, "parse", "unterminated-string", 3, 16),
    case("unexpected-character", """\
        seqc 1
        layer @Block {}
        """, "parse", "unexpected-character", 2, 7, says="'@'"),
    case("missing-equals", """\
        seqc 1
        experiment e {
          train { steps 1000 }
        }
        """, "parse", "unexpected-token", 3, 17, says="unexpected number `1000`"),
    case("missing-colon-in-param", """\
        seqc 1
        layer Block(d int) {}
        """, "parse", "unexpected-token", 2, 15, says="expected: `:`"),
    case("missing-brace-at-eof", """\
        seqc 1
        input data {
          train = text("t.txt")
        """, "parse", "unexpected-eof", 3, 24, says="is a `}` or `)` missing?"),
    case("stray-closing-brace", """\
        seqc 1
        input data {}
        }
        """, "parse", "unexpected-token", 3, 1),
    case("empty-return", layer("LayerNorm(d)", FORWARD.replace("return f(x)", "return")),
         "parse", "unexpected-token", 4, 56),
    case("import-after-declaration", """\
        seqc 1
        input data {}
        import "common.seq"
        """, "parse", "unexpected-token", 3, 1, says="imports come right after the `seqc` header"),
    case("misspelt-layer", """\
        seqc 1
        layr Block(d: int) {}
        """, "parse", "unexpected-token", 2, 1, suggestion="layer"),
    case("misspelt-experiment", """\
        seqc 1
        expriment e {}
        """, "parse", "unexpected-token", 2, 1, suggestion="experiment"),
    case("duplicate-kwarg", layer("LayerNorm(d, eps = 1e-5, eps = 1e-6)"),
         "parse", "duplicate-argument", 3, 32, says="argument `eps` given twice"),
    case("positional-after-named", layer("LayerNorm(eps = 1e-5, d)"),
         "parse", "positional-after-named", 3, 29),
    case("duplicate-map-key", """\
        seqc 1
        input data {
          train = text("t.txt")
          tokenizer = chars()
          buckets = {32: 64, 64: 32, 32: 16}
        }
        """, "parse", "duplicate-key", 5, 30, says="key `32` appears twice"),
    case("two-forwards", layer("LayerNorm(d)", FORWARD + FORWARD),
         "parse", "duplicate-forward", 5, 3),
    case("range-bound-not-a-number", layer("LayerNorm(d)", params="d: int > x"), "parse",
         "unexpected-token", 2, 22, says="a range's bounds are numbers"),
    case("range-after-default", layer("LayerNorm(d)", params="d: int = 3 > 0"), "parse",
         "unexpected-token", 2, 24, says="a range comes right after a param's type"),
    case("device-count-zero", """\
        seqc 1
        experiment e {
          distribution { devices = 0 x cpu(memory = "2GiB") }
        }
        """, "parse", "bad-count", 3, 28),
    case("device-count-fraction", """\
        seqc 1
        experiment e {
          distribution { devices = 1.5 x gpu() }
        }
        """, "parse", "bad-count", 3, 28, says="found:    1.5"),
    # -- limits: 5,000 levels deep, one level a line; the caret is on the level past 100 (the
    # experiment's `{` on line 2 is the first level, so the 100th bracket, on line 102, is past)
    case("nested-lists-too-deep", "seqc 1\nexperiment e {\n  x = " + "[\n" * 5000 + "]" * 5000
         + "\n}\n", "parse", "too-deep", 102, 1, says="at most 100 nested"),
    case("nested-minus-too-deep", "seqc 1\nexperiment e {\n  x = " + "-\n" * 5000 + "1\n}\n",
         "parse", "too-deep", 102, 1),
    case("nested-blocks-too-deep", "seqc 1\nexperiment e {\n" + "a {\n" * 5000 + "}" * 5000
         + "\n}\n", "parse", "too-deep", 102, 3),
]

# ------------------------------------------------------------------------------------ resolve

RESOLVE = [
    case("import-not-found", """\
        seqc 1
        import "comon.seq"
        """, "resolve", "import-not-found", 2, 1, suggestion="common.seq",
         files={"common.seq": "seqc 1\n"}),
    case("import-not-found-no-sibling", """\
        seqc 1
        import "lib/common.seq"
        """, "resolve", "import-not-found", 2, 1,
         says="import paths are relative to the importing file"),
    case("import-cycle", """\
        seqc 1
        import "b.seq"
        """, "resolve", "import-cycle", 3, 1, file="b.seq",
         says="main.seq -> b.seq -> main.seq",
         files={"b.seq": 'seqc 1\n\nimport "main.seq"\n'}),
    case("imported-file-not-utf8", """\
        seqc 1
        import "latin1.seq"
        """, "file", "not-utf8", 2, 1, files={"latin1.seq": "seqc 1\n# caf\udce9\n"}),
    case("duplicate-across-files", """\
        seqc 1
        import "lib.seq"

        input data { train = text("u.txt"); tokenizer = chars() }
        """, "resolve", "duplicate-name", 4, 1, note=("lib.seq", 2, 1),
         files={"lib.seq": 'seqc 1\ninput data { train = text("t.txt"); tokenizer = chars() }\n'}),
    case("duplicate-experiment", after(LM, """\
        experiment e { tasks = [lm] }
        experiment e { tasks = [lm] }
        """), "resolve", "duplicate-name", 9, 1, note=("main.seq", 8, 1)),
    case("shadows-builtin", """\
        seqc 1
        layer LayerNorm(d: int) {
          forward (x: float32[B, d]) -> float32[B, d] { return x }
        }
        """, "resolve", "shadows-builtin", 2, 1, says="`MyLayerNorm`"),
    case("unknown-experiment", after(LM, """\
        experiment lm.tiny { tasks = [lm] }
        """), "resolve", "unknown-experiment", None, None, suggestion="lm.tiny",
         experiment="lm.tinny"),
    case("unknown-parent", after(LM, """\
        experiment lm.tiny { tasks = [lm] }
        experiment lm.big extends lm.tniy { train.steps = 2 }
        """), "resolve", "unknown-parent", 9, 27, suggestion="lm.tiny"),
    case("extends-cycle", after(LM, """\
        experiment a extends b { tasks = [lm] }
        experiment b extends a { }
        """), "resolve", "extends-cycle", 9, 22, says="a -> b -> a"),
    case("unknown-experiment-field", after(LM, """\
        experiment e { tasks = [lm]; descripton = "tiny" }
        """), "resolve", "unknown-field", 8, 30, suggestion="description"),
    case("unknown-block-field", after(LM, """\
        experiment e {
          tasks = [lm]
          train { stepz = 1 }
        }
        """), "resolve", "unknown-field", 10, 11, suggestion="steps"),
    case("field-of-a-number", after(LM, """\
        experiment e { tasks = [lm]; train.steps.max = 3 }
        """), "resolve", "unknown-field", 8, 30, says="`train.steps` is 1000, which has no fields"),
    case("block-assigned", after(LM, """\
        experiment e { tasks = [lm]; train = 3 }
        """), "resolve", "block-assign", 8, 30),
    case("task-not-in-experiment", after(LM, """\
        task mt { input = data; model = M(vocab = 3) }
        experiment e { tasks = [lm]; mt.model.d = 16 }
        """), "resolve", "unknown-task", 9, 30, says="add it to `tasks = [...]`"),
    case("missing-tasks", after(LM, """\
        experiment e { train.steps = 10 }
        """), "resolve", "missing-tasks", 8, 1),
    case("bare-call-outside-export", after(LM, """\
        experiment e {
          tasks = [lm]
          train { adam(lr = 1e-3) }
        }
        """), "resolve", "bare-call", 10, 11),
    case("nested-block", after(LM, """\
        experiment e {
          tasks = [lm]
          train { optimizer { lr = 1e-3 } }
        }
        """), "resolve", "nested-block", 10, 11, says="`optimizer.field = value`"),
    case("model-param-too-deep", after(LM, """\
        experiment e { tasks = [lm]; lm.model.d.x = 1 }
        """), "resolve", "unknown-field", 8, 30),
    case("unknown-model-param-in-experiment", after(LM, """\
        experiment e { tasks = [lm]; lm.model.width = 16 }
        """), "resolve", "unknown-param", 8, 30, note=("main.seq", 3, 1)),
    case("block-in-task", """\
        seqc 1
        input data { train = text("t.txt"); tokenizer = chars() }
        task lm { input = data; loss { label_smoothing = 0.1 } }
        """, "resolve", "bad-task-item", 3, 25),
    case("task-without-model", """\
        seqc 1
        input data { train = text("t.txt"); tokenizer = chars() }
        task lm { input = data }
        """, "resolve", "missing-param", 3, 1, says="task `lm` has no `model`"),
    case("set-without-equals", after(LM, """\
        experiment e { tasks = [lm] }
        """), "usage", "bad-override", None, None, experiment="e", overrides=("train.steps",)),
    case("set-path-not-dotted", after(LM, """\
        experiment e { tasks = [lm] }
        """), "usage", "bad-override", None, None, experiment="e",
         overrides=("train steps=3",)),
    # The command line is rendered as a source with the Nth `--set PATH=VALUE` on line N: an
    # unknown path underlines the whole `PATH=VALUE` from column 7, a bad value the value.
    case("set-unknown-path", after(LM, """\
        experiment e { tasks = [lm] }
        """), "resolve", "unknown-field", 1, 7, suggestion="steps", file="<command line>",
         experiment="e", overrides=("train.stepz=3",)),
    case("set-unknown-model-param", after(LM, """\
        experiment e { tasks = [lm] }
        """), "resolve", "unknown-param", 1, 7, suggestion="d", file="<command line>",
         experiment="e", overrides=("lm.model.dd=3",)),
    case("second-set-unknown-path", after(LM, """\
        experiment e { tasks = [lm] }
        """), "resolve", "unknown-field", 2, 7, suggestion="steps", file="<command line>",
         says="    2 | --set train.stepz=3", experiment="e",
         overrides=("lm.model.d=16", "train.stepz=3", "train.seed=2")),
    case("set-wrong-type", after(LM, """\
        experiment e { tasks = [lm] }
        """), "check", "wrong-type", 1, 19, file="<command line>", says="the name `many`",
         experiment="e", overrides=("train.steps=many",)),
    case("set-unparsable-value", after(LM, """\
        experiment e { tasks = [lm] }
        """), "parse", "unexpected-eof", 1, 21, file="<command line>",
         says="--set train.steps=1+", experiment="e", overrides=("train.steps=1+",)),
    # -- where imports may reach (README, "Trust and limits"); test_confinement.py has more
    case("import-outside-the-tree", """\
        seqc 1
        import "/etc/shadow"
        """, "resolve", "import-outside", 2, 1, says="found:    /etc/shadow"),
    case("import-not-a-spec", """\
        seqc 1
        import "notes.txt"
        """, "resolve", "import-not-seq", 2, 1, files={"notes.txt": "not a spec\n"}),
    case("imports-too-deep", """\
        seqc 1
        import "f1.seq"
        """, "resolve", "imports-too-deep", 2, 1, file="f99.seq",
         files={f"f{i}.seq": f'seqc 1\nimport "f{i + 1}.seq"\n' for i in range(1, 101)}),
]

# ------------------------------------------------------------------------------------ check

CHECK = [
    # -- sub-layer calls (line 3, `  f = <call>`)
    case("unknown-layer-kind", layer("LayerNrom(d)"), "check", "unknown-kind", 3, 7,
         suggestion="LayerNorm"),
    case("unknown-param", layer("LayerNorm(d, epss = 1e-5)"), "check", "unknown-param", 3, 20,
         suggestion="eps"),
    case("missing-required-param", layer("Embedding(vocab = d)"), "check", "missing-param", 3, 7,
         says="`Embedding` needs `d`"),
    case("too-many-positional", layer("LayerNorm(d, 1e-6)"), "check", "too-many-args", 3, 20,
         says="positional params: d"),
    case("string-for-int", layer('LayerNorm("8")'), "check", "wrong-type", 3, 17,
         says='found:    string "8"'),
    case("float-for-int", layer("LayerNorm(8.0)"), "check", "wrong-type", 3, 17,
         says="found:    float `8.0`"),
    case("param-of-wrong-type", layer("LayerNorm(d, scale = d)"), "check", "wrong-type", 3, 28,
         says="int (from `d`)"),
    case("bad-choice", layer('FeedForward(d, 4 * d, activation = "gleu")'), "check",
         "bad-choice", 3, 42, suggestion="gelu"),
    case("bad-choice-bare-word", layer("FeedForward(d, 4 * d, activation = gleu)"), "check",
         "bad-choice", 3, 42, suggestion="gelu"),
    case("arithmetic-on-a-string", layer('LayerNorm(d + "1")'), "check", "wrong-type", 3, 21,
         says="arithmetic needs numbers"),
    # -- declarations
    case("unknown-param-type", layer("LayerNorm(d)", params="d: integer"), "check",
         "unknown-type", 2, 16, suggestion="int"),
    case("tensor-type-as-param-type", layer("LayerNorm(d)", params="d: float32[B]"), "check",
         "unknown-type", 2, 16, says="tensor types belong in `forward"),
    case("duplicate-param", layer("LayerNorm(d)", params="d: int, d: int"), "check",
         "duplicate-param", 2, 21, note=("main.seq", 2, 13)),
    case("duplicate-sublayer", """\
        seqc 1
        layer Block(d: int) {
          f = LayerNorm(d)
          f = RMSNorm(d)
          forward (x: float32[B, d]) -> float32[B, d] { return f(x) }
        }
        """, "check", "duplicate-sublayer", 4, 3, note=("main.seq", 3, 3)),
    case("missing-forward", """\
        seqc 1
        layer Block(d: int) {
          f = LayerNorm(d)
        }
        """, "check", "missing-forward", 2, 1),
    case("layer-cycle", """\
        seqc 1
        layer A(d: int) {
          b = B(d)
          forward (x: float32[B, d]) -> float32[B, d] { return b(x) }
        }
        layer B(d: int) {
          a = A(d)
          forward (x: float32[B, d]) -> float32[B, d] { return a(x) }
        }
        """, "check", "layer-cycle", 2, 1, says="A -> B -> A"),
    # -- forward (line 4)
    case("unknown-dtype", layer("LayerNorm(d)", FORWARD.replace("(x: float32", "(x: floa32")),
         "check", "unknown-dtype", 4, 15, suggestion="float32"),
    case("unknown-name-in-forward", layer("LayerNorm(d)", FORWARD.replace("f(x)", "f(xs)")),
         "check", "unknown-name", 4, 58, suggestion="x"),
    case("call-of-a-builtin", layer("LayerNorm(d)", FORWARD.replace("f(x)", "LayerNorm(x)")),
         "check", "not-a-layer", 4, 56, says="declare it first, e.g. `layernorm = LayerNorm(...)`"),
    case("call-of-a-value", layer("LayerNorm(d)", FORWARD.replace("f(x)", "x(x)")),
         "check", "not-a-layer", 4, 56, says="`x` is a value, not a layer"),
    case("layer-as-value", layer("LayerNorm(d)", FORWARD.replace("f(x)", "f")),
         "check", "not-a-value", 4, 56, says="write `f(...)`"),
    case("attribute-in-forward", layer("LayerNorm(d)", FORWARD.replace("f(x)", "f(x).mean")),
         "check", "bad-forward", 4, 56),
    case("missing-return", layer("LayerNorm(d)", FORWARD.replace("return f(x)", "y = f(x)")),
         "check", "missing-return", 4, 3),
    case("return-count", layer("LayerNorm(d)", FORWARD.replace(
        "-> float32[B, d]", "-> (float32[B, d], float32[B, d])")),
         "check", "return-count", 4, 66, says="declares 2 output(s) but returns 1"),
    case("statement-after-return", """\
        seqc 1
        layer Block(d: int) {
          f = LayerNorm(d)
          forward (x: float32[B, d]) -> float32[B, d] {
            return f(x)
            y = x
          }
        }
        """, "check", "unreachable", 6, 5),
    case("tie-to-unknown-sibling", """\
        seqc 1
        model M(vocab: int, d: int = 8) {
          embed = Embedding(vocab, d)
          out = Softmax(vocab, d, tie = embd)
          forward (ids: int32[B, T]) -> float32[B, T, vocab] { return out(embed(ids)) }
        }
        """, "check", "unknown-name", 4, 33, suggestion="embed"),
    case("tie-to-a-param", """\
        seqc 1
        model M(vocab: int, d: int = 8) {
          embed = Embedding(vocab, d)
          out = Softmax(vocab, d, tie = vocab)
          forward (ids: int32[B, T]) -> float32[B, T, vocab] { return out(embed(ids)) }
        }
        """, "check", "wrong-type", 4, 33, says="expected: layer | none"),
    # -- inputs
    case("unknown-tokenizer", """\
        seqc 1
        input data { train = text("t.txt"); tokenizer = charz() }
        """, "check", "unknown-kind", 2, 49, suggestion="chars"),
    case("input-missing-field", """\
        seqc 1
        input data { train = text("t.txt") }
        """, "check", "missing-param", 2, 1, says="input `data` needs `tokenizer`"),
    case("bucket-of-wrong-type", """\
        seqc 1
        input data {
          train = text("t.txt")
          tokenizer = chars()
          buckets = {32: 64, 64: "32"}
        }
        """, "check", "wrong-type", 5, 26, says='found:    string "32"'),
    # -- tasks (line 7: `task lm { input = data; model = ` is 32 columns)
    case("unknown-input", after(MODEL, """\
        task lm { input = dat; model = M(vocab = input.vocab_size) }
        """), "check", "unknown-input", 7, 19, suggestion="data"),
    case("unknown-model", after(MODEL, """\
        task lm { input = data; model = MM(vocab = 3) }
        """), "check", "unknown-model", 7, 33, suggestion="M"),
    case("input-attribute-typo", after(MODEL, """\
        task lm { input = data; model = M(vocab = input.vocab_sise) }
        """), "check", "unknown-name", 7, 43, suggestion="vocab_size"),
    case("model-unknown-param", after(MODEL, """\
        task lm { input = data; model = M(vocab = 3, dd = 2) }
        """), "check", "unknown-param", 7, 46, suggestion="d", note=("main.seq", 3, 1)),
    case("model-missing-param", after(MODEL, """\
        task lm { input = data; model = M() }
        """), "check", "missing-param", 7, 33, says="`M` needs `vocab`"),
    case("model-division-by-zero", after(MODEL, """\
        task lm { input = data; model = M(vocab = 3, d = 8 // 0) }
        """), "check", "division-by-zero", 7, 50),
    # -- experiments (line 8, `experiment e { tasks = [lm]; ` is 29 columns)
    case("unknown-optimizer", after(LM, """\
        experiment e { tasks = [lm]; train.optimizer = adamm(lr = 1e-3) }
        """), "check", "unknown-kind", 8, 48, suggestion="adam"),
    case("unknown-task-in-list", after(LM, """\
        experiment e { tasks = [lm, mt] }
        """), "check", "unknown-task", 8, 29),
    case("task-listed-twice", after(LM, """\
        experiment e { tasks = [lm, lm] }
        """), "check", "duplicate-task", 8, 29),
    case("bad-backend", after(LM, """\
        experiment e { tasks = [lm]; backend = "torch" }
        """), "check", "bad-choice", 8, 40, says='expected: "jax" | "tf"'),
    case("bad-size", after(LM, """\
        experiment e {
          tasks = [lm]
          distribution { devices = 2 x gpu(memory = "16 gigs") }
        }
        """), "check", "bad-size", 10, 45, says='a size such as "512MiB"'),
    # -- values: the ranges params declare, at the value's column, with the range in words
    case("width-zero", layer("LayerNorm(0)"), "check", "out-of-range", 3, 17,
         says="expected: an int > 0 and < 2**31"),
    case("dropout-above-one", layer("Dropout(1.5)"), "check", "out-of-range", 3, 15,
         says="`Dropout.rate` must be in [0, 1)"),
    case("heads-zero", layer("SelfAttention(d, 0)"), "check", "out-of-range", 3, 24,
         says="found:    0"),
    case("model-width-negative", after(LM, EXP + "lm.model.d = -8 }\n"), "check",
         "out-of-range", 8, 43, says="found:    -8", note=("main.seq", 4, 11)),
    case("steps-zero", after(LM, EXP + "train.steps = 0 }\n"), "check", "out-of-range", 8, 44,
         says="`train.steps` must be > 0"),
    case("set-steps-negative", after(LM, EXP + "}\n"), "check", "out-of-range", 1, 19,
         file="<command line>", experiment="e", overrides=("train.steps=-5",)),
    case("steps-of-400-digits", after(LM, EXP + "train.steps = 1" + "0" * 400 + " }\n"),
         "check", "out-of-range", 8, 44, says="found:    an int of 401 digits"),
    case("lr-inf", after(LM, EXP + "train.optimizer = adam(lr = 1e999) }\n"), "check",
         "not-finite", 8, 58, says="expected: a finite float >= 0"),
    case("lr-nan", after(LM, EXP + "train.optimizer = adam(lr = 1e999 - 1e999) }\n"), "check",
         "not-finite", 8, 58, says="found:    nan"),
    case("beta-one", after(LM, EXP + "train.optimizer = adam(beta2 = 1.0) }\n"), "check",
         "out-of-range", 8, 61),
    case("log-every-negative", after(LM, EXP + "train { log_every = -1 } }\n"), "check",
         "out-of-range", 8, 50, says="expected: an int >= 0"),
    case("label-smoothing-two", after(MODEL, """\
        task lm { input = data; model = M(vocab = 3); loss = cross_entropy(label_smoothing = 2) }
        """), "check", "out-of-range", 7, 86, says="found:    2"),
    case("temperature-zero", after(MODEL, """\
        task lm { input = data; model = M(vocab = 3); decode = sample(temperature = 0) }
        """), "check", "out-of-range", 7, 77, says="a finite float > 0"),
    case("top-p-zero", after(MODEL, """\
        task lm { input = data; model = M(vocab = 3); decode = sample(top_p = 0.0) }
        """), "check", "out-of-range", 7, 71, says="in (0, 1]"),
    case("beam-width-zero", after(MODEL, """\
        task lm { input = data; model = M(vocab = 3); decode = beam(0) }
        """), "check", "out-of-range", 7, 61),
    case("bucket-batch-zero", """\
        seqc 1
        input data {
          train = text("t.txt")
          tokenizer = chars()
          buckets = {32: 64, 64: 0}
        }
        """, "check", "out-of-range", 5, 26, says="the value at key 64 of `data.buckets`"),
    case("bucket-length-zero", """\
        seqc 1
        input data {
          train = text("t.txt")
          tokenizer = chars()
          buckets = {32: 64, 0: 8}
        }
        """, "check", "out-of-range", 5, 22, says="a key of `data.buckets` must be > 0"),
    case("vocab-size-zero", """\
        seqc 1
        input data { train = text("t.txt"); tokenizer = sentencepiece(vocab_size = 0) }
        """, "check", "out-of-range", 2, 76),
    case("device-memory-zero",
         after(LM, EXP + 'distribution.devices = 2 x gpu(memory = "0GiB") }\n'),
         "check", "out-of-range", 8, 70, says='found:    "0GiB" (0 bytes)'),
    case("device-memory-too-large",
         after(LM, EXP + "distribution.devices = 2 x gpu(memory = 10 ** 30) }\n"),
         "check", "out-of-range", 8, 70, says="below 2**63 bytes"),
    case("too-many-devices", after(LM, EXP + "distribution.devices = 100000 x cpu() }\n"),
         "check", "bad-count", 8, 53, says="at most 65536 copies"),
    # -- relations between params, declared with the kind: at the value that breaks them
    case("heads-do-not-divide-width", layer("SelfAttention(256, 3)"), "check", "bad-relation",
         3, 26, says="found:    d = 256, heads = 3 (256 % 3 = 1)", note=("main.seq", 3, 21)),
    case("model-heads-do-not-divide-width", after(ATTN, EXP + "lm.model.heads = 3 }\n"),
         "check", "bad-relation", 8, 47, says="`SelfAttention` needs `d % heads == 0`",
         note=("main.seq", 3, 30)),
    case("set-heads-do-not-divide-width", after(ATTN, EXP + "}\n"), "check", "bad-relation",
         1, 22, file="<command line>", says="d = 256, heads = 3", note=("main.seq", 3, 30),
         experiment="e", overrides=("lm.model.heads=3",)),
    case("padding-id-outside-vocab", layer("Embedding(8, d, padding_id = 8)"), "check",
         "bad-relation", 3, 36, says="`padding_id < vocab`", note=("main.seq", 3, 17)),
    case("odd-sinusoid-width", layer("SinusoidalPosition(7)"), "check", "bad-relation", 3, 26,
         says="7 % 2 = 1"),
    case("piecewise-values-count", after(LM, EXP + PIECEWISE.format("[1e-3]") + " }\n"),
         "check", "bad-relation", 8, 96, note=("main.seq", 8, 81)),
    case("set-piecewise-boundaries",
         after(LM, EXP + PIECEWISE.format("[1e-3, 1e-4]") + " }\n"),
         "check", "bad-relation", 1, 37, file="<command line>",
         says="boundaries = [10, 20]", experiment="e",
         overrides=("train.optimizer.lr.boundaries=[10, 20]",)),
    # -- ranges a user declares (`d: int > 0`)
    case("user-range", after(MODEL.replace("d: int = 8", "d: int > 0 = 8"),
                             "task lm { input = data; model = M(vocab = input.vocab_size) }\n"
                             + EXP + "lm.model.d = 0 }\n"),
         "check", "out-of-range", 8, 43, says="`M.d` must be > 0"),
    case("user-range-default", layer("LayerNorm(d)", params="d: int > 0 = 0"), "check",
         "out-of-range", 2, 26),
    case("range-on-a-string", layer("LayerNorm(d)", params='d: int, s: str > 0 = "a"'),
         "check", "bad-range", 2, 28, says="found:    `s: str`"),
    case("empty-range", layer("LayerNorm(d)", params="d: int, p: float in [1, 0]"), "check",
         "bad-range", 2, 30, says="holds no value"),
    # -- sizes: counts that would stall, arithmetic that would hang
    case("repeat-too-many", layer("repeat(100000) LayerNorm(d)"), "check", "bad-count", 3, 14,
         says="from 1 to 10,000"),
    case("model-repeat-too-many", after(ATTN, EXP + "lm.model.layers = 20000 }\n"), "check",
         "bad-count", 8, 48),
    case("huge-power", after(LM, EXP + "lm.model.d = 2 ** 100000 }\n"), "check", "overflow",
         8, 43, says="`2 ** 100000` is too large to compute"),
    case("set-tower-of-powers", after(LM, EXP + "}\n"), "check", "overflow", 1, 19,
         file="<command line>", says="found:    about 369,693,100 digits", experiment="e",
         overrides=("train.steps=9**9**9",)),
]

# fmt: on

ALL = PARSE + RESOLVE + CHECK


def write(root: Path, main: str, files: dict[str, str] | None = None) -> Path:
    """Write `main.seq` and the other files of a case into `root`; returns main.seq's path."""
    for name, text in {**(files or {}), "main.seq": main}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        # surrogateescape: a "\udcXX" in a case is the raw byte XX (a file that is not UTF-8)
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
    return root / "main.seq"


def compile_error(case: Case, root: Path) -> SeqcError:
    main = write(root, case.text, case.files)
    with pytest.raises(SeqcError) as info:
        check_program(load_program(main), case.experiment, list(case.overrides))
    return info.value


def span_file(err: SeqcError) -> str:
    assert err.span is not None
    return err.span.file if err.span.file.startswith("<") else Path(err.span.file).name


def assert_caret(rendered: str, col: int) -> None:
    """The excerpt's caret line starts under column `col` of the source line above it."""
    lines = rendered.splitlines()
    carets = [i for i, line in enumerate(lines) if line.rstrip().endswith("^")]
    assert carets, rendered
    caret, source = lines[carets[0]], lines[carets[0] - 1]
    gutter = source.index("| ") + 2
    assert caret.index("^") - gutter == col - 1, rendered


@pytest.mark.parametrize("case", ALL)
def test_error(case: Case, tmp_path: Path) -> None:
    err = compile_error(case, tmp_path)
    rendered = err.render()
    assert (err.phase, err.code) == (case.phase, case.code), rendered
    if case.line is None:
        assert err.span is None, rendered
        assert "^" not in rendered
    else:
        assert err.span is not None, rendered
        assert (span_file(err), err.span.line, err.span.col) == (case.file, case.line, case.col), (
            rendered
        )
        where = f"{case.file}:{case.line}:{case.col}: {case.phase} error [{case.code}]: "
        assert where in rendered.splitlines()[0], rendered
        assert_caret(rendered, case.col)
    assert err.suggestion == case.suggestion, rendered
    if case.suggestion is not None:
        assert f"did you mean `{case.suggestion}`?" in rendered
    if case.says is not None:
        assert case.says in rendered
    if case.note is not None:
        assert err.notes, rendered
        span = err.notes[0].span
        assert (Path(span.file).name, span.line, span.col) == case.note, rendered
        assert rendered.count("^") >= 2  # the note has its own excerpt


def test_the_tables_cover_every_phase() -> None:
    phases = {c.values[0].phase for c in ALL}
    assert {"parse", "resolve", "check", "usage", "file"} <= phases
    assert len(ALL) >= 45


def test_unknown_experiment_via_resolve(tmp_path: Path) -> None:
    main = write(tmp_path, LM + "experiment lm.tiny { tasks = [lm] }\n")
    program = load_program(main)
    with pytest.raises(SeqcError) as info:
        resolve(program, "lm.tinny")
    err = info.value
    assert (err.phase, err.code, err.span) == ("resolve", "unknown-experiment", None)
    assert err.suggestion == "lm.tiny"
    assert err.location == str(main)  # no span: the message names the root file instead
    assert "expected: one of lm.tiny" in err.render()


# ------------------------------------------------------------------------------------ CLI

runner = CliRunner()


def cli(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


def assert_clean_failure(result, code: int = 2) -> None:
    """A spec or usage error: the expected exit code, and no Python internals on the screen."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert "internal error" not in result.output


@pytest.mark.parametrize("case", ALL)
def test_cli_check_reports_each_error_at_its_location(case: Case, tmp_path: Path) -> None:
    main = write(tmp_path, case.text, case.files)
    args: list[str | Path] = ["check", main]
    if case.experiment is not None:
        args += ["-e", case.experiment]
    for o in case.overrides:
        args += ["--set", o]
    result = cli(*args)
    assert_clean_failure(result)
    assert f"{case.phase} error [{case.code}]" in result.output
    if case.line is not None:
        assert f"{case.file}:{case.line}:{case.col}: " in result.output


def test_cli_bad_spec(tmp_path: Path) -> None:
    spec = tmp_path / "bad.seq"
    spec.write_text("seqc 1\nlayr Block(d: int) {}\n")
    for command in ("check", "list", "fmt"):
        result = cli(command, spec)
        assert_clean_failure(result)
        assert f"{spec}:2:1: parse error [unexpected-token]" in result.output
        assert "did you mean `layer`?" in result.output
        assert "^^^^" in result.output


def test_cli_missing_file(tmp_path: Path) -> None:
    for command in ("check", "fmt", "list"):
        result = cli(command, tmp_path / "nope.seq")
        assert_clean_failure(result)
        assert "file error [file-not-found]: no such file:" in result.output


def test_cli_directory_as_file(tmp_path: Path) -> None:
    result = cli("check", tmp_path)
    assert_clean_failure(result)
    assert "file error [is-dir]" in result.output and "is a directory" in result.output


def test_cli_not_utf8(tmp_path: Path) -> None:
    spec = tmp_path / "latin1.seq"
    spec.write_bytes(b"seqc 1\n# caf\xe9\n")
    for command in ("check", "fmt"):
        result = cli(command, spec)
        assert_clean_failure(result)
        assert "file error [not-utf8]" in result.output
        assert "not UTF-8 text (byte 12)" in result.output


def test_cli_fmt_check_unformatted(tmp_path: Path) -> None:
    spec = tmp_path / "messy.seq"
    messy = 'seqc 1\ninput  data {train = text("t.txt")\n tokenizer=chars()}\n'
    spec.write_text(messy)
    result = cli("fmt", "--check", spec)
    assert_clean_failure(result, code=1)
    assert f"would reformat {spec}" in result.output
    assert spec.read_text() == messy  # --check changes nothing


def test_cli_set_needs_experiment(tmp_path: Path) -> None:
    spec = tmp_path / "main.seq"
    spec.write_text(LM + "experiment e { tasks = [lm] }\n")
    result = cli("check", spec, "--set", "train.steps=10")
    assert_clean_failure(result)
    assert "usage error [bad-override]: --set needs -e EXPERIMENT" in result.output


def test_cli_show_unknown_experiment(tmp_path: Path) -> None:
    spec = tmp_path / "main.seq"
    spec.write_text(LM + "experiment lm.tiny { tasks = [lm] }\n")
    result = cli("show", spec, "-e", "nope")
    assert_clean_failure(result)
    assert "resolve error [unknown-experiment]: no experiment named `nope`" in result.output
    result = cli("show", spec, "-e", "lm.tinny")
    assert_clean_failure(result)
    assert "did you mean `lm.tiny`?" in result.output
