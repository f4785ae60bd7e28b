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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

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


def ints(r: Range | None) -> st.SearchStrategy[Val]:
    lo, hi = _int_bounds(r)
    small = st.integers(lo, min(hi, lo + 64))
    return st.one_of(small, st.integers(lo, hi)).map(lambda v: Val(_number_text(v), v))


def floats(r: Range | None) -> st.SearchStrategy[Val]:
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
def strings(max_size: int = 12) -> st.SearchStrategy[Val]:
    alphabet = st.sampled_from(string.ascii_letters + string.digits + " _-./:,é€")
    plain = st.text(alphabet, max_size=max_size)
    escaped = st.sampled_from(["a\\nb", 'say \\"hi\\"', "tab\\tx", "back\\\\slash"])
    return st.one_of(plain.map(lambda s: Val(f'"{s}"', s)), escaped.map(lambda s: Val(f'"{s}"')))


@functools.cache  # built once: a strategy is a description, reused by every draw
def sizes() -> st.SearchStrategy[Val]:
    unit = st.sampled_from(["B", "KB", "MB", "GB", "KiB", "MiB", "GiB"])
    return st.one_of(
        st.builds(lambda n, u: Val(f'"{n}{u}"'), st.integers(1, 64), unit),
        st.integers(1, 2**40).map(lambda n: Val(str(n), n)),
    )


@st.composite
def values(draw: st.DrawFn, t: Type, ctx: Ctx, name: str = "", depth: int = 0) -> Val:
    """A value of type `t` as spec text."""
    if t.name == "int":
        if name in WIDTH_PARAMS:
            v = draw(st.sampled_from(WIDTHS))
            return Val(str(v), v)
        if name == "heads":
            v = draw(st.sampled_from(HEADS))
            return Val(str(v), v)
        return draw(ints(t.range))
    if t.name == "float":
        return draw(floats(t.range))
    if t.name == "bool":
        b = draw(st.booleans())
        return Val("true" if b else "false", b)
    if t.name == "str":
        return draw(strings())
    if t.name == "size":
        return draw(sizes())
    if t.name == "none":
        return Val("none", None)
    if t.name == "enum":
        c = draw(st.sampled_from(t.choices))
        return Val(f'"{c}"', c)
    if t.name == "layer":
        return Val(draw(st.sampled_from(ctx.siblings))) if ctx.siblings else Val("none")
    if t.name == "kind":
        return draw(calls(t.choices[0], ctx, depth + 1))
    if t.name == "union":
        options = [a for a in t.args if a.name != "layer" or ctx.siblings]
        return draw(values(draw(st.sampled_from(options)), ctx, name, depth))
    if t.name == "list":
        items = draw(st.lists(values(t.args[0], ctx, name, depth + 1), max_size=3))
        return Val("[" + ", ".join(i.text for i in items) + "]", [i.value for i in items])
    if t.name == "map":
        pairs = draw(
            st.lists(
                st.tuples(keys(t.args[0]), values(t.args[1], ctx, "", depth + 1)),
                max_size=3,
                unique_by=lambda p: p[0],
            )
        )
        return Val("{" + ", ".join(f"{k}: {v.text}" for k, v in pairs) + "}")
    raise AssertionError(f"no strategy for type {t}")  # `any`: the generator writes those


def keys(t: Type) -> st.SearchStrategy[str]:
    if t.name == "str":
        return st.one_of(names(), strings(6).map(lambda v: v.text))
    if t.name == "union":
        return keys(t.args[0])
    return st.integers(1, 512).map(str)


@functools.cache  # built once: a strategy is a description, reused by every draw
def names() -> st.SearchStrategy[str]:
    return st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(lambda s: s not in KEYWORDS)


KEYWORDS = frozenset(
    {"seqc", "import", "input", "layer", "model", "task", "experiment", "extends", "forward"}
    | {"return", "repeat", "true", "false", "none", "in", "x"}
)


@dataclass
class Ctx:
    """What a value may refer to: sibling sub-layers (weight tying)."""

    siblings: list[str] = field(default_factory=list)


def _relations_hold(kind: KindSpec, given: dict[str, Any]) -> bool:
    args = {p.name: given.get(p.name, p.default) for p in kind.params}
    return all(rel.check(args) is not False for rel in kind.relations)


@st.composite
def calls(draw: st.DrawFn, namespace: str, ctx: Ctx, depth: int = 0) -> Val:
    """A call of a kind of `namespace`: required params, some optional ones, positional or named,
    within the kind's relations (drawn again until they hold); a bare name when it has no
    required params."""
    kinds = [k for k in REGISTRY.namespaces[namespace].values() if depth < 3 or not k.params]
    kind = draw(st.sampled_from(kinds))
    if kind.name == "piecewise":
        return draw(piecewise())
    for _ in range(20):
        chosen = [p for p in kind.params if p.required or draw(st.integers(0, 3)) == 0]
        chosen = [p for p in chosen if _writable(p, ctx)]
        given = {p.name: draw(values(p.type, ctx, p.name, depth)) for p in chosen}
        if _relations_hold(kind, {k: v.value for k, v in given.items()}):
            break
    else:
        given = {
            p.name: draw(values(p.type, ctx, p.name, depth)) for p in kind.params if p.required
        }
    if not given and draw(st.booleans()):
        return Val(kind.name)
    n_positional = draw(st.integers(0, len(kind.positional)))
    positional: list[str] = []
    for p in kind.positional[:n_positional]:  # a prefix of the positional params, all given
        if p not in given:
            break
        positional.append(p)
    parts = [given[p].text for p in positional]
    parts += [f"{n} = {v.text}" for n, v in given.items() if n not in positional]
    return Val(f"{kind.name}(" + ", ".join(parts) + ")")


def _writable(p: ParamSpec, ctx: Ctx) -> bool:
    if p.type.name == "any":
        return False
    return p.type.name != "layer" or bool(ctx.siblings)


@st.composite
def piecewise(draw: st.DrawFn) -> Val:
    bounds = sorted(set(draw(st.lists(st.integers(0, 10_000), min_size=1, max_size=4))))
    vals = draw(st.lists(floats(Range(0, 1)), min_size=len(bounds) + 1, max_size=len(bounds) + 1))
    return Val(f"piecewise([{', '.join(map(str, bounds))}], [{', '.join(v.text for v in vals)}])")


# ------------------------------------------------------------------------------- valid specs


@st.composite
def user_layer(draw: st.DrawFn, name: str, is_model: bool, inner: list[str]) -> str:
    """A layer (or model) with int params, sub-layers from the catalogue (or the user layers in
    `inner`), and a forward that calls each sub-layer once."""
    params = ["d: int > 0 = " + str(draw(st.sampled_from(WIDTHS)))]
    if is_model:
        params.insert(0, "vocab: int")
    if draw(st.booleans()):
        params.append(f'heads: int in [1, 64] = {draw(st.sampled_from(HEADS))} "heads"')
    if draw(st.booleans()):
        params.append(f"rate: float in [0, 1) = {draw(floats(Range(0, 0.9))).text}")
    subs: list[str] = []
    sub_names = draw(
        st.lists(names(), min_size=1, max_size=4, unique=True).filter(
            lambda ns: (
                not {"d", "vocab", "heads", "rate", "x"} & set(ns)
                and not any(re.fullmatch(r"h\d+", n) for n in ns)
            )
        )
    )
    for i, sub in enumerate(sub_names):
        ctx = Ctx(siblings=sub_names[:i])
        if inner and draw(st.integers(0, 2)) == 0:
            call = f"{draw(st.sampled_from(inner))}(d = d)"
            rep = f"repeat({draw(st.integers(1, 3))}) " if draw(st.booleans()) else ""
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
        arg = last if i == 0 or draw(st.integers(0, 3)) else f"{last} + x"
        body.append(f"    h{i} = {sub}({arg})")
        last = f"h{i}"
    header = f"{'model' if is_model else 'layer'} {name}(" + ", ".join(params) + ")"
    doc = ['  "A generated layer."'] if draw(st.booleans()) else []
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


@st.composite
def block_fields(draw: st.DrawFn, block: str, ctx: Ctx, skip: tuple[str, ...] = ()) -> list[str]:
    """`field = value` lines for a block of the catalogue (`seqc layers train`)."""
    spec = REGISTRY.get("block", block)
    assert spec is not None
    lines = []
    for p in spec.params:
        if p.name in skip or not _writable(p, ctx):
            continue
        if p.required or draw(st.integers(0, 2)) == 0:
            lines.append(f"{p.name} = {draw(values(p.type, ctx, p.name)).text}")
    return lines


@dataclass(frozen=True)
class Spec:
    """A generated program: the root file, and a library it imports (or none)."""

    root: str
    library: str | None = None


LIBRARY = "lib.seq"


@st.composite
def valid_specs(draw: st.DrawFn) -> Spec:
    """A whole program that `seqc check` should accept (most of the time: see the module doc)."""
    layer_names = draw(
        st.lists(st.sampled_from(["Block", "Mixer", "Stage"]), max_size=2, unique=True)
    )
    layers = [draw(user_layer(n, False, layer_names[:i])) for i, n in enumerate(layer_names)]
    model = draw(user_layer("Net", True, layer_names))
    data = draw(names())
    input_lines = [
        f"train = {draw(calls('reader', Ctx())).text}",
        f"tokenizer = {draw(calls('tokenizer', Ctx())).text}",
        # `augment` is for audio inputs only, which the drawn reader may not be
        *draw(block_fields("input", Ctx(), skip=("train", "tokenizer", "augment"))),
    ]
    task = draw(names().filter(lambda s: s != data))
    task_lines = [
        f"input = {data}",
        "model = Net(vocab = input.vocab_size)",
        *draw(block_fields("task", Ctx(), skip=("input", "model"))),
    ]
    exp = "exp." + draw(names())
    exp_lines = [f"tasks = [{task}]", *draw(block_fields("experiment", Ctx(), skip=("tasks",)))]
    for block in ("train", "distribution", "export"):
        if draw(st.booleans()):
            skip = ("formats", "shard") if block in ("export", "distribution") else ()
            fields = draw(block_fields(block, Ctx(), skip=skip))
            if block == "export":
                for _ in range(draw(st.integers(0, 2))):  # bare calls: `onnx()`, not `onnx`
                    call = draw(calls("export", Ctx())).text
                    fields.append(call if call.endswith(")") else call + "()")
            if block == "distribution":
                fields = [f for f in fields if not f.startswith("placement")]
            exp_lines.append(f"{block} {{ " + "; ".join(fields) + " }")
    decls = [
        f"input {data} {{\n  " + "\n  ".join(input_lines) + "\n}",
        f"task {task} {{\n  " + "\n  ".join(task_lines) + "\n}",
        f"experiment {exp} {{\n  " + "\n  ".join(exp_lines) + "\n}",
    ]
    if draw(st.booleans()):
        over = [
            f"{task}.model.d = {draw(st.sampled_from(WIDTHS))}",
            *(f"train.{f}" for f in draw(block_fields("train", Ctx()))),
        ]
        decls.append(f"experiment {exp}.more extends {exp} {{\n  " + "\n  ".join(over) + "\n}")
    header = "seqc 1\n# generated by tests/support/spec_fuzz.py\n"
    if layers and draw(st.booleans()):
        library = header + "\n" + "\n\n".join(layers) + "\n"
        root = header + f'import "{LIBRARY}"\n\n' + "\n\n".join([model, *decls]) + "\n"
        return Spec(root, library)
    return Spec(header + "\n" + "\n\n".join([*layers, model, *decls]) + "\n")


# --------------------------------------------------------------------------------- mutations

TOKEN = re.compile(
    r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?|\w+|\s+|.', re.DOTALL
)
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
    ("(" * 3000 + "1" + ")" * 3000),
    ("[" * 3000 + "]" * 3000),
    ("{" * 3000 + "}" * 3000),
    ("-" * 5000 + "1"),
    ("1" + " + 1" * 20000),
    ("2" + " ** 2" * 3000),
    ("a" + ".a" * 20000),
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
    muts = tuple(draw(st.lists(mutations, min_size=0, max_size=3)))
    target = draw(st.sampled_from(sorted(files)))
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
