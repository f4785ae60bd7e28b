"""A grammar-aware fuzzer of the front end: valid specs built from the catalogue, then damaged.

Why: `seqc check` runs on every save in an editor, on half-typed and pasted text. Whatever the
bytes, the front end (parse -> load_program -> check_program, what `seqc check FILE` does) must
answer with a `SeqcError`, which renders with a location, or succeed: never another exception,
never a hang. `test_properties.py` damages the bundled examples; this module writes new
specs instead, so every kind, param type, range and block field of the catalogue is exercised.

Two layers of strategies:
- `valid_specs()`: a whole program from `seqc.spec.kinds.REGISTRY` (user layers and a model
  calling built-in layers with typed arguments inside their ranges and relations, inputs, tasks,
  experiments with `train`, `distribution` and `export` blocks, an `extends` with overrides),
  written in the surface syntax of `grammar.lark`. Most of them check cleanly (the tests assert
  a healthy fraction does, so the generator cannot quietly decay into garbage).
- `fuzz_cases()`: a valid spec, sometimes split into a root file and an imported library, then
  `Mutation`s applied to its bytes: deleted, duplicated, swapped and replaced tokens, truncation,
  random bytes (non-UTF-8 included), nesting thousands deep (brackets, blocks, operators) and
  huge literals (10,000-digit integers, `1e400`, megabyte strings).

`run_front_end` writes a case into a folder and runs the front end under a time limit;
`bench/fuzz.py` and `tests/frontend/test_fuzz.py` share it.

Generating is most of a fuzz test's time, so it is kept cheap. Every strategy is built once and
drawn from many times (`functools.cache` on the functions that build them, keyed by their
hashable arguments, and module constants): Hypothesis validates and labels each new strategy
object on its first draw, and a spec draws hundreds of values. This alone made the same cases
(byte for byte) 2.5 times faster to generate; with the cheaper `names` and `TOKEN` below, the
300 cases of `test_fuzz.py` take 5 s of CPU instead of 11.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import signal
import string
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

import seqc.spec.catalogue  # noqa: F401  (fills the registry)
from seqc.spec.kinds import REGISTRY, KindSpec, ParamSpec
from seqc.spec.types import INT_LIMIT, Range, Type

# ------------------------------------------------------------------------------ valid values

WIDTHS = (8, 16, 32, 64)
"""Widths divide by every head count below and are even: `SelfAttention`'s `d % heads == 0` and
`SinusoidalPosition`'s even `d` hold whichever pair is drawn."""
HEADS = (1, 2, 4, 8)
WIDTH_PARAMS = frozenset(
    {"d", "d_in", "d_out", "ff", "d_hidden", "d_memory", "head_dim", "channels", "bins"}
)


@functools.cache  # built once per choice of options: see the module doc
def sampled(options: tuple[Any, ...]) -> SearchStrategy[Any]:
    return st.sampled_from(options)


@functools.cache  # built once per bounds: see the module doc
def between(lo: int, hi: int) -> SearchStrategy[int]:
    return st.integers(lo, hi)


BOOLS = st.booleans()


@dataclass(frozen=True)
class Val:
    """A value as written in a spec, and as Python sees it (for a kind's relations)."""

    text: str
    value: Any = None


def _number_text(x: float | int) -> str:
    if isinstance(x, int):
        return str(x) if x >= 0 else f"-{-x}"
    text = repr(float(x))
    return text if not text.startswith("-") else f"-{text[1:]}"


def _int_bounds(r: Range | None) -> tuple[int, int]:
    lo, hi = -1000, 100_000
    if r is not None and r.low is not None:
        lo = math.floor(r.low) + (1 if r.low_open and float(r.low).is_integer() else 0)
        lo = max(lo, math.ceil(r.low))
        if r.low_open and lo == r.low:
            lo += 1
    if r is not None and r.high is not None:
        hi = math.ceil(r.high) - (1 if r.high_open and float(r.high).is_integer() else 0)
        hi = min(hi, math.floor(r.high))
        if r.high_open and hi == r.high:
            hi -= 1
    return max(lo, -INT_LIMIT), min(hi, INT_LIMIT - 1, lo + 100_000)


@functools.cache  # built once per range: see the module doc
def ints(r: Range | None) -> SearchStrategy[Val]:
    lo, hi = _int_bounds(r)
    small = st.integers(lo, min(hi, lo + 64))
    return st.one_of(small, st.integers(lo, hi)).map(lambda v: Val(_number_text(v), v))


@functools.cache  # built once per range: see the module doc
def floats(r: Range | None) -> SearchStrategy[Val]:
    lo = r.low if r is not None and r.low is not None else -1e6
    hi = r.high if r is not None and r.high is not None else 1e6
    lo, hi = float(lo), float(hi)
    opened = bool(r and r.low_open), bool(r and r.high_open)
    if hi - lo > 1e6:
        hi = lo + 1e6
        opened = opened[0], False
    plain = st.floats(
        lo, hi, exclude_min=opened[0], exclude_max=opened[1], allow_nan=False, width=64
    )
    return plain.map(lambda v: Val(_number_text(v), v))


@functools.cache  # built once: a strategy is a description, reused by every draw
def strings(max_size: int = 12) -> SearchStrategy[Val]:
    alphabet = st.sampled_from(string.ascii_letters + string.digits + " _-./:,é€")
    plain = st.text(alphabet, max_size=max_size)
    escaped = st.sampled_from(["a\\nb", 'say \\"hi\\"', "tab\\tx", "back\\\\slash"])
    return st.one_of(plain.map(lambda s: Val(f'"{s}"', s)), escaped.map(lambda s: Val(f'"{s}"')))


@functools.cache  # built once: a strategy is a description, reused by every draw
def sizes() -> SearchStrategy[Val]:
    unit = st.sampled_from(["B", "KB", "MB", "GB", "KiB", "MiB", "GiB"])
    return st.one_of(
        st.builds(lambda n, u: Val(f'"{n}{u}"'), st.integers(1, 64), unit),
        st.integers(1, 2**40).map(lambda n: Val(str(n), n)),
    )


def values(t: Type, ctx: Ctx, name: str = "", depth: int = 0) -> SearchStrategy[Val]:
    """A value of type `t` as spec text."""
    return _values_by_key(repr(t), t, ctx, name, depth)


@functools.cache  # built once per type, context, name and depth: see the module doc
def _values_by_key(key: str, t: Type, ctx: Ctx, name: str, depth: int) -> SearchStrategy[Val]:
    """`key` is the type's repr: types that differ only in their range are equal (and hash
    alike), but a value must be drawn within the range of its own."""
    return _values(t, ctx, name, depth)


@st.composite
def _values(draw: st.DrawFn, t: Type, ctx: Ctx, name: str, depth: int) -> Val:
    if t.name == "int":
        if name in WIDTH_PARAMS:
            v = draw(sampled(WIDTHS))
            return Val(str(v), v)
        if name == "heads":
            v = draw(sampled(HEADS))
            return Val(str(v), v)
        return draw(ints(t.range))
    if t.name == "float":
        return draw(floats(t.range))
    if t.name == "bool":
        b = draw(BOOLS)
        return Val("true" if b else "false", b)
    if t.name == "str":
        return draw(strings())
    if t.name == "size":
        return draw(sizes())
    if t.name == "none":
        return Val("none", None)
    if t.name == "enum":
        c = draw(sampled(t.choices))
        return Val(f'"{c}"', c)
    if t.name == "layer":
        return Val(draw(sampled(ctx.siblings))) if ctx.siblings else Val("none")
    if t.name == "kind":
        return draw(calls(t.choices[0], ctx, depth + 1))
    if t.name == "union":
        alternative = draw(_alternatives(repr(t), t, bool(ctx.siblings)))
        return draw(values(alternative, ctx, name, depth))
    if t.name == "list":
        items = draw(_lists(values(t.args[0], ctx, name, depth + 1)))
        return Val("[" + ", ".join(i.text for i in items) + "]", [i.value for i in items])
    if t.name == "map":
        pairs = draw(_pairs(keys(t.args[0]), values(t.args[1], ctx, "", depth + 1)))
        return Val("{" + ", ".join(f"{k}: {v.text}" for k, v in pairs) + "}")
    raise AssertionError(f"no strategy for type {t}")  # `any`: the generator writes those


@functools.cache  # built once per union type: see the module doc
def _alternatives(key: str, t: Type, with_layers: bool) -> SearchStrategy[Type]:
    """The types of a union, a layer only where there is one to name. Keyed by the union's
    repr, as `values` is: unions whose alternatives differ only in range are equal."""
    return st.sampled_from([a for a in t.args if a.name != "layer" or with_layers])


@functools.cache  # built once per element strategy: see the module doc
def _lists(items: SearchStrategy[Val]) -> SearchStrategy[list[Val]]:
    return st.lists(items, max_size=3)


@functools.cache  # built once per key and value strategy: see the module doc
def _pairs(
    keys: SearchStrategy[str], vals: SearchStrategy[Val]
) -> SearchStrategy[list[tuple[str, Val]]]:
    return st.lists(st.tuples(keys, vals), max_size=3, unique_by=lambda p: p[0])


@functools.cache  # built once per type: see the module doc
def keys(t: Type) -> SearchStrategy[str]:
    if t.name == "str":
        return st.one_of(names(), strings(6).map(lambda v: v.text))
    if t.name == "union":
        return keys(t.args[0])
    if t.name == "enum":
        return st.sampled_from(t.choices)
    return st.integers(1, 512).map(str)


@functools.cache  # built once: a strategy is a description, reused by every draw
def names() -> SearchStrategy[str]:
    """`[a-z][a-z0-9_]{0,6}`, not a keyword. Built from a letter and a text rather than with
    `st.from_regex`, whose draws cost two and a half times as much: a spec draws about ten."""
    tail = st.text(string.ascii_lowercase + string.digits + "_", max_size=6)
    name = st.builds(str.__add__, st.sampled_from(string.ascii_lowercase), tail)
    return name.filter(lambda s: s not in KEYWORDS)


@functools.cache  # built once per name: see the module doc
def _names_but(taken: str) -> SearchStrategy[str]:
    return names().filter(lambda s: s != taken)


KEYWORDS = frozenset(
    {"seqc", "import", "input", "layer", "model", "task", "experiment", "extends", "forward"}
    | {"return", "repeat", "true", "false", "none", "in", "x"}
)


@dataclass(frozen=True)
class Ctx:
    """What a value may refer to: sibling sub-layers (weight tying). Frozen, so that the
    strategies drawn in a context are built once per context (see the module doc)."""

    siblings: tuple[str, ...] = ()


def _relations_hold(kind: KindSpec, given: dict[str, Any]) -> bool:
    args = {p.name: given.get(p.name, p.default) for p in kind.params}
    return all(rel.check(args) is not False for rel in kind.relations)


@functools.cache  # built once per namespace, context and depth: see the module doc
def calls(namespace: str, ctx: Ctx, depth: int = 0) -> SearchStrategy[Val]:
    """A call of a kind of `namespace`: required params, some optional ones, positional or named,
    within the kind's relations (drawn again until they hold); a bare name when it has no
    required params."""
    return _calls(namespace, ctx, depth)


@st.composite
def _calls(draw: st.DrawFn, namespace: str, ctx: Ctx, depth: int) -> Val:
    kind = draw(_kinds(namespace, depth < 3))
    if kind.name == "piecewise":
        return draw(piecewise())
    for _ in range(20):
        chosen = [p for p in kind.params if p.required or draw(between(0, 3)) == 0]
        chosen = [p for p in chosen if _writable(p, ctx)]
        given = {p.name: draw(values(p.type, ctx, p.name, depth)) for p in chosen}
        if _relations_hold(kind, {k: v.value for k, v in given.items()}):
            break
    else:
        given = {
            p.name: draw(values(p.type, ctx, p.name, depth)) for p in kind.params if p.required
        }
    if not given and draw(BOOLS):
        return Val(kind.name)
    n_positional = draw(between(0, len(kind.positional)))
    positional: list[str] = []
    for p in kind.positional[:n_positional]:  # a prefix of the positional params, all given
        if p not in given:
            break
        positional.append(p)
    parts = [given[p].text for p in positional]
    parts += [f"{n} = {v.text}" for n, v in given.items() if n not in positional]
    return Val(f"{kind.name}(" + ", ".join(parts) + ")")


@functools.cache  # built once per namespace: see the module doc
def _kinds(namespace: str, with_params: bool) -> SearchStrategy[KindSpec]:
    """The kinds of `namespace`; deep inside a call, only those with no params (it ends)."""
    kinds = REGISTRY.namespaces[namespace].values()
    return st.sampled_from([k for k in kinds if with_params or not k.params])


def _writable(p: ParamSpec, ctx: Ctx) -> bool:
    if p.type.name == "any":
        return False
    return p.type.name != "layer" or bool(ctx.siblings)


_BOUNDS = st.lists(st.integers(0, 10_000), min_size=1, max_size=4)


@functools.cache  # built once per length: see the module doc
def _fractions(n: int) -> SearchStrategy[list[Val]]:
    return st.lists(floats(Range(0, 1)), min_size=n, max_size=n)


@st.composite
def piecewise(draw: st.DrawFn) -> Val:
    bounds = sorted(set(draw(_BOUNDS)))
    vals = draw(_fractions(len(bounds) + 1))
    return Val(f"piecewise([{', '.join(map(str, bounds))}], [{', '.join(v.text for v in vals)}])")


# ------------------------------------------------------------------------------- valid specs


@functools.cache  # built once: see the module doc
def _sub_names() -> SearchStrategy[list[str]]:
    """A layer's sub-layer names, none of them a param or a name of its forward."""
    return st.lists(names(), min_size=1, max_size=4, unique=True).filter(
        lambda ns: (
            not {"d", "vocab", "heads", "rate", "x"} & set(ns)
            and not any(re.fullmatch(r"h\d+", n) for n in ns)
        )
    )


@st.composite
def user_layer(draw: st.DrawFn, name: str, is_model: bool, inner: tuple[str, ...]) -> str:
    """A layer (or model) with int params, sub-layers from the catalogue (or the user layers in
    `inner`), and a forward that calls each sub-layer once."""
    params = ["d: int > 0 = " + str(draw(sampled(WIDTHS)))]
    if is_model:
        params.insert(0, "vocab: int")
    if draw(BOOLS):
        params.append(f'heads: int in [1, 64] = {draw(sampled(HEADS))} "heads"')
    if draw(BOOLS):
        params.append(f"rate: float in [0, 1) = {draw(floats(Range(0, 0.9))).text}")
    subs: list[str] = []
    sub_names = draw(_sub_names())
    for i, sub in enumerate(sub_names):
        ctx = Ctx(siblings=tuple(sub_names[:i]))
        if inner and draw(between(0, 2)) == 0:
            call = f"{draw(sampled(inner))}(d = d)"
            rep = f"repeat({draw(between(1, 3))}) " if draw(BOOLS) else ""
            subs.append(f"  {sub} = {rep}{call}")
            continue
        text = draw(calls("layer", ctx)).text
        text = text if text.endswith(")") else text + "()"  # a sub-layer is a call
        if "heads" in params[-1] or any(p.startswith("heads") for p in params):
            text = re.sub(r"\bheads = \d+", "heads = heads", text)
        subs.append(f"  {sub} = {text}")
    x_type = "int32[B, T]" if is_model else "float32[B, T, d]"
    out_type = "float32[B, T, vocab]" if is_model else "float32[B, T, d]"
    body, last = [], "x"
    for i, sub in enumerate(sub_names):
        arg = last if i == 0 or draw(between(0, 3)) else f"{last} + x"
        body.append(f"    h{i} = {sub}({arg})")
        last = f"h{i}"
    header = f"{'model' if is_model else 'layer'} {name}(" + ", ".join(params) + ")"
    doc = ['  "A generated layer."'] if draw(BOOLS) else []
    return "\n".join(
        [
            header + " {",
            *doc,
            *subs,
            f"  forward (x: {x_type}) -> {out_type} {{",
            *body,
            f"    return {last}",
            "  }",
            "}",
        ]
    )


@functools.cache  # built once per block, context and fields left out: see the module doc
def block_fields(block: str, ctx: Ctx, skip: tuple[str, ...] = ()) -> SearchStrategy[list[str]]:
    """`field = value` lines for a block of the catalogue (`seqc layers train`)."""
    return _block_fields(block, ctx, skip)


@st.composite
def _block_fields(draw: st.DrawFn, block: str, ctx: Ctx, skip: tuple[str, ...]) -> list[str]:
    spec = REGISTRY.get("block", block)
    assert spec is not None
    lines = []
    for p in spec.params:
        if p.name in skip or not _writable(p, ctx):
            continue
        if p.required or draw(between(0, 2)) == 0:
            lines.append(f"{p.name} = {draw(values(p.type, ctx, p.name)).text}")
    return lines


@dataclass(frozen=True)
class Spec:
    """A generated program: the root file, and a library it imports (or none)."""

    root: str
    library: str | None = None


LIBRARY = "lib.seq"


_LAYER_NAMES = st.lists(st.sampled_from(["Block", "Mixer", "Stage"]), max_size=2, unique=True)


@st.composite
def valid_specs(draw: st.DrawFn) -> Spec:
    """A whole program that `seqc check` should accept (most of the time: see the module doc)."""
    layer_names = tuple(draw(_LAYER_NAMES))
    layers = [draw(user_layer(n, False, layer_names[:i])) for i, n in enumerate(layer_names)]
    model = draw(user_layer("Net", True, layer_names))
    data = draw(names())
    input_lines = [
        f"train = {draw(calls('reader', Ctx())).text}",
        f"tokenizer = {draw(calls('tokenizer', Ctx())).text}",
        # `augment` is for audio inputs only, which the drawn reader may not be
        *draw(block_fields("input", Ctx(), skip=("train", "tokenizer", "augment"))),
    ]
    task = draw(_names_but(data))
    task_lines = [
        f"input = {data}",
        "model = Net(vocab = input.vocab_size)",
        *draw(block_fields("task", Ctx(), skip=("input", "model"))),
    ]
    exp = "exp." + draw(names())
    exp_lines = [f"tasks = [{task}]", *draw(block_fields("experiment", Ctx(), skip=("tasks",)))]
    for block in ("train", "distribution", "export"):
        if draw(BOOLS):
            skip = ("formats", "shard") if block in ("export", "distribution") else ()
            fields = draw(block_fields(block, Ctx(), skip=skip))
            if block == "export":
                for _ in range(draw(between(0, 2))):  # bare calls: `onnx()`, not `onnx`
                    call = draw(calls("export", Ctx())).text
                    fields.append(call if call.endswith(")") else call + "()")
            if block == "distribution":  # a pipeline needs a stage axis and a model to cut
                fields = [f for f in fields if not f.startswith(("placement", "pipeline"))]
                fields = [f for f in fields if not f.startswith("mesh") or "stage" not in f]
            exp_lines.append(f"{block} {{ " + "; ".join(fields) + " }")
    decls = [
        f"input {data} {{\n  " + "\n  ".join(input_lines) + "\n}",
        f"task {task} {{\n  " + "\n  ".join(task_lines) + "\n}",
        f"experiment {exp} {{\n  " + "\n  ".join(exp_lines) + "\n}",
    ]
    if draw(BOOLS):
        over = [
            f"{task}.model.d = {draw(sampled(WIDTHS))}",
            *(f"train.{f}" for f in draw(block_fields("train", Ctx()))),
        ]
        decls.append(f"experiment {exp}.more extends {exp} {{\n  " + "\n  ".join(over) + "\n}")
    header = "seqc 1\n# generated by tests/support/spec_fuzz.py\n"
    if layers and draw(BOOLS):
        library = header + "\n" + "\n\n".join(layers) + "\n"
        root = header + f'import "{LIBRARY}"\n\n' + "\n\n".join([model, *decls]) + "\n"
        return Spec(root, library)
    return Spec(header + "\n" + "\n\n".join([*layers, model, *decls]) + "\n")


# --------------------------------------------------------------------------------- mutations

TOKEN = re.compile(
    r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|#[^\n]*|\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?|\w+|\s+|.', re.DOTALL
)
"""A string is matched a run of plain characters at a time (not one alternative per character):
the same tokens, and a spec holding a `huge` megabyte string splits in 0.02 s, not 0.4 s."""
POOL = [
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "=",
    ",",
    ".",
    ":",
    ";",
    '"',
    "#",
    "->",
    "**",
    "-",
    "+",
    "*",
    "x",
    "4 x ",
    "repeat(2)",
    "layer",
    "model",
    "forward",
    "return",
    "extends",
    "import",
    "in",
    "none",
    "true",
    "0",
    "-1",
    "1e400",
    "1e-400",
    "0.5",
    "2147483648",
    "\n",
    "\\",
    "@",
    "\t",
    "seqc 1\n",
    'import "lib.seq"\n',
    'import "../../etc/passwd.seq"\n',
    "Embedding",
    "d",
    "B",
    "vocab",
    "input.vocab_size",
    "train",
    "distribution",
    "export",
    "experiment",
    "task",
]


@dataclass(frozen=True)
class Mutation:
    """One damage to a spec's bytes; `at`, `to` are positions scaled to its token count."""

    op: str
    at: float = 0.0
    to: float = 0.0
    size: int = 0
    blob: bytes = b""

    def apply(self, data: bytes) -> bytes:
        text = data.decode("utf-8", "surrogateescape")
        toks = TOKEN.findall(text)
        i = min(int(self.at * len(toks)), max(len(toks) - 1, 0))
        j = min(int(self.to * len(toks)), max(len(toks) - 1, 0))
        if self.op == "delete" and toks:
            del toks[i : i + 1 + self.size % 3]
        elif self.op == "duplicate" and toks:
            toks.insert(i, toks[i])
        elif self.op == "swap" and toks:
            toks[i], toks[j] = toks[j], toks[i]
        elif self.op == "replace" and toks:
            toks[i] = POOL[self.size % len(POOL)]
        elif self.op == "insert":
            toks.insert(i, POOL[self.size % len(POOL)])
        elif self.op == "word" and toks:  # a name of this file where another was
            words = [t for t in toks if re.fullmatch(r"[A-Za-z_]\w*", t)]
            named = set(words)  # a nested spec has thousands of tokens: no list scan per token
            spots = [k for k, t in enumerate(toks) if t in named]
            if words:
                toks[spots[i % len(spots)]] = words[(self.size + j) % len(words)]
        elif self.op in ("move_line", "copy_line"):  # a whole statement somewhere else
            lines = text.split("\n")
            a, b = int(self.at * len(lines)) % len(lines), int(self.to * len(lines)) % len(lines)
            line = lines.pop(a) if self.op == "move_line" else lines[a]
            lines.insert(b, line)
            return "\n".join(lines).encode("utf-8", "surrogateescape")
        elif self.op == "truncate":
            return data[: int(self.at * len(data))]
        elif self.op == "bytes":
            k = int(self.at * len(data))
            return data[:k] + self.blob + data[k:]
        elif self.op == "nest":
            toks.insert(i, _nesting(self.size, self.blob))
        elif self.op == "huge":
            toks[i if toks else 0 : i + 1] = [_huge(self.size, toks[i] if toks else "")]
        return "".join(toks).encode("utf-8", "surrogateescape")


NESTINGS = [
    # Thousands deep, past `MAX_NESTING` (100) and Python's recursion limit (1,000), all but
    # the last. The chains of `+` and `.` were 20,000 long, for no more proof: they were half
    # the time `test_every_nesting_mutation_nests_past_the_limit` took.
    ("(" * 3000 + "1" + ")" * 3000),
    ("[" * 3000 + "]" * 3000),
    ("{" * 3000 + "}" * 3000),
    ("-" * 5000 + "1"),
    ("1" + " + 1" * 3000),
    ("2" + " ** 2" * 3000),
    ("a" + ".a" * 3000),
    ("f(" * 3000 + ")" * 3000),
    ("train { " * 3000 + "}" * 3000),
    ("float32[" * 2000 + "B" + "]" * 2000),
    ("(" * 99 + "1" + ")" * 99),
    ("{x: " * 1500 + "1" + "}" * 1500),
]


def _nesting(size: int, blob: bytes) -> str:
    return NESTINGS[size % len(NESTINGS)]


def _huge(size: int, token: str) -> str:
    huge = [
        "9" * 5000,
        "1" + "0" * 10_000,
        "1e400",
        "1e-400",
        "1" + "_0" * 3000,
        "0." + "0" * 5000 + "1",
        "9" * 4299 + "e9999999999",
        '"' + "a" * 1_000_000 + '"',
        "x" * 100_000,
        "9 ** 9 ** 9",
        "2 ** 100000",
        "10 ** 4400",
    ]
    return huge[size % len(huge)]


TEXT_OPS = (
    "delete",
    "duplicate",
    "swap",
    "replace",
    "insert",
    "truncate",
    "word",
    "move_line",
    "copy_line",
)
"""Mutations of the text's tokens and lines, placed at random."""

OPS = (*TEXT_OPS, "bytes", "nest", "huge")
"""Every mutation `Mutation.apply` knows."""

mutations = st.one_of(
    st.builds(
        Mutation,
        st.sampled_from([*TEXT_OPS, "word"]),  # swapping names finds the most: twice as often
        st.floats(0, 1),
        st.floats(0, 1),
        st.integers(0, 1000),
    ),
    st.builds(Mutation, st.just("bytes"), st.floats(0, 1), blob=st.binary(min_size=1, max_size=8)),
    st.builds(Mutation, st.just("nest"), st.floats(0, 1), size=st.integers(0, 1000)),
    st.builds(Mutation, st.just("huge"), st.floats(0, 1), size=st.integers(0, 1000)),
)


_MUTATION_LISTS = st.lists(mutations, min_size=0, max_size=3)


@dataclass(frozen=True)
class Case:
    """A spec to run: the files' bytes (root first) and how they were damaged."""

    files: dict[str, bytes]
    mutations: tuple[Mutation, ...] = ()
    target: str = "spec.seq"

    def describe(self) -> str:
        parts = [f"mutations: {list(self.mutations)}"]
        for name, data in self.files.items():
            shown = data if len(data) < 4000 else data[:2000] + b" ... " + data[-1000:]
            parts.append(f"--- {name} ({len(data)} bytes)\n{shown.decode('utf-8', 'replace')}")
        return "\n".join(parts)


ROOT = "spec.seq"


def spec_files(spec: Spec) -> dict[str, bytes]:
    files = {ROOT: spec.root.encode()}
    if spec.library is not None:
        files[LIBRARY] = spec.library.encode()
    return files


@st.composite
def fuzz_cases(draw: st.DrawFn) -> Case:
    """A valid spec with one to three mutations of one of its files (sometimes none)."""
    files = spec_files(draw(valid_specs()))
    muts = tuple(draw(_MUTATION_LISTS))
    target = draw(sampled(tuple(sorted(files))))
    data = files[target]
    for m in muts:
        data = m.apply(data)
    return Case({**files, target: data}, muts, target)


# ------------------------------------------------------------------------------ the property


class Hang(Exception):
    """The front end ran past the time limit on one case."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise `Hang` in the main thread after `seconds` (SIGALRM; no limit elsewhere)."""

    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"no answer in {seconds} s")

    try:
        old = signal.signal(signal.SIGALRM, fire)
    except ValueError:  # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass(frozen=True)
class Outcome:
    """What the front end did with a case: "ok", "error" (a SeqcError, rendered), or "crash"
    (any other exception or a hang, with its traceback)."""

    status: str
    detail: str = ""
    seconds: float = 0.0


def write_case(case: Case, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        (folder / name).write_bytes(data)
    return folder / ROOT


def run_front_end(path: Path, limit_s: float = 20.0) -> Outcome:
    """`seqc check FILE` without the CLI: parse, load the imports, check every experiment."""
    from seqc.compiler.check import check_program
    from seqc.resolve.program import load_program
    from seqc.spec.errors import SeqcError

    start = time.perf_counter()
    try:
        with time_limit(limit_s):
            check_program(load_program(path))
    except SeqcError as e:
        try:
            rendered = e.render()
        except Exception:
            return Outcome(
                "crash", "render failed:\n" + traceback.format_exc(), time.perf_counter() - start
            )
        return Outcome("error", rendered, time.perf_counter() - start)
    except Exception:
        return Outcome("crash", traceback.format_exc(), time.perf_counter() - start)
    return Outcome("ok", "", time.perf_counter() - start)


def minimize(case: Case, still_fails: Any) -> Case:
    """Delete lines, then characters, of the damaged file while `still_fails(case)` holds."""
    name = case.target
    data = case.files[name]
    for unit in (b"\n", None):
        chunk = max(len(data) // 2, 1)
        while chunk >= 1:
            pieces = data.split(unit) if unit else [bytes([b]) for b in data]
            i, changed = 0, False
            while i < len(pieces):
                trial = (unit or b"").join(pieces[:i] + pieces[i + chunk :])
                candidate = Case({**case.files, name: trial}, case.mutations, name)
                if trial != data and still_fails(candidate):
                    data, pieces, changed = trial, pieces[:i] + pieces[i + chunk :], True
                else:
                    i += chunk
            if not changed:
                chunk //= 2
            if unit is None and len(data) > 4000:
                break
    return Case({**case.files, name: data}, case.mutations, name)
