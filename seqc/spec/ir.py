"""The spec IR: what a .seq file says, as typed pydantic nodes.

Every node carries the span it came from, so a check in any later pass can point at the user's
line. Statement-like nodes also carry the comments written before them and at the end of their
line, so `seqc fmt` never drops a comment. The IR is syntax-level: names are not yet resolved and
values not yet evaluated; `seqc.resolve.experiment` does that.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field


class Span(BaseModel):
    """A source range: 1-based line and column of the first character, end exclusive."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class Node(BaseModel):
    # defer_build: validators are built on first validation (IR from JSON or from users), not at
    # import; the parser and the parse cache build nodes with `trusted`, which needs none.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    span: Span | None = Field(
        default=None, description="Where in the source this node was written."
    )


class Stmt(Node):
    """A node that stands on its own line(s) and may carry comments."""

    comments: tuple[str, ...] = Field(
        default=(), description='Comment lines written just before; "" marks a blank line.'
    )
    trailing: str | None = Field(default=None, description="Comment at the end of its last line.")
    blank_before: bool = Field(
        default=False, description="A blank line separates it from the statement before."
    )


# ------------------------------------------------------------------------------------ expressions


class Number(Node):
    node: Literal["number"] = "number"
    value: int | float
    text: str = Field(description="As written (`1e-3` stays `1e-3` through `seqc fmt`).")


class String(Node):
    node: Literal["string"] = "string"
    value: str


class Bool(Node):
    node: Literal["bool"] = "bool"
    value: bool


class NoneLit(Node):
    node: Literal["none"] = "none"


class Name(Node):
    """A reference: a param, a sub-layer, a declaration, a catalogue kind."""

    node: Literal["name"] = "name"
    id: str


class Attr(Node):
    """`obj.name`, e.g. `input.vocab_size`."""

    node: Literal["attr"] = "attr"
    obj: Expr
    name: str


class KwArg(Node):
    name: str
    value: Expr


class Call(Node):
    """`func(args, name = value)`; `func` is a Name or an Attr."""

    node: Literal["call"] = "call"
    func: Expr
    args: tuple[Expr, ...] = ()
    kwargs: tuple[KwArg, ...] = ()


class BinOp(Node):
    node: Literal["binop"] = "binop"
    op: Literal["+", "-", "*", "/", "//", "%", "**"]
    left: Expr
    right: Expr


class Neg(Node):
    node: Literal["neg"] = "neg"
    operand: Expr


class ListExpr(Node):
    node: Literal["list"] = "list"
    items: tuple[Expr, ...] = ()


class MapEntry(Node):
    key: str | int | float
    key_quoted: bool = Field(default=False, description="Written as a string literal.")
    value: Expr


class MapExpr(Node):
    node: Literal["map"] = "map"
    entries: tuple[MapEntry, ...] = ()


class Replicate(Node):
    """`4 x gpu(memory = "16GiB")`: n copies of a value (devices of a mesh)."""

    node: Literal["replicate"] = "replicate"
    count: int
    value: Expr


class TypeExpr(Node):
    """`int`, `list[int]`, or a tensor type `float32[B, T, d]` whose args are dims."""

    node: Literal["type"] = "type"
    name: str
    args: tuple[Expr, ...] | None = Field(
        default=None, description="Bracketed args; None when written without brackets."
    )


Expr = Annotated[
    Number
    | String
    | Bool
    | NoneLit
    | Name
    | Attr
    | Call
    | BinOp
    | Neg
    | ListExpr
    | MapExpr
    | Replicate
    | TypeExpr,
    Field(discriminator="node"),
]


# ------------------------------------------------------------------------------------ bodies


class Assign(Stmt):
    """`path.to.field = value` in an input, task or experiment body."""

    item: Literal["assign"] = "assign"
    path: tuple[str, ...]
    value: Expr


class CallStmt(Stmt):
    """A bare call in a body, e.g. `onnx(quantize = "int8")` inside `export { }`."""

    item: Literal["call"] = "call"
    call: Call


class Block(Stmt):
    """A nested block, e.g. `train { steps = 10 }`."""

    item: Literal["block"] = "block"
    name: str
    body: Body


BodyItem = Annotated[Assign | CallStmt | Block, Field(discriminator="item")]


class Body(Node):
    doc: str | None = None
    items: tuple[BodyItem, ...] = ()
    end_comments: tuple[str, ...] = Field(default=(), description="Comments before the `}`.")


# ------------------------------------------------------------------------------------ layers


class RangeExpr(Node):
    """The values a param accepts: one comparison (`> 0`, `<= 1`) or an interval (`in [0, 1)`)."""

    low: Number | None = None
    high: Number | None = None
    low_open: bool = Field(default=False, description="`>` or `(`: the low bound is excluded.")
    high_open: bool = Field(default=False, description="`<` or `)`: the high bound is excluded.")
    interval: bool = Field(default=False, description="Written `in [low, high]`.")


class Param(Stmt):
    """`name: type range = default "description"`, e.g. `d: int > 0 = 256 "width"`."""

    name: str
    type: TypeExpr
    range: RangeExpr | None = None
    default: Expr | None = None
    doc: str | None = None


class SubLayer(Stmt):
    """`name = Kind(args)` or `name = repeat(n) Kind(args)` (n copies with separate weights)."""

    name: str
    call: Call
    repeat: Expr | None = None


class Let(Stmt):
    stmt: Literal["let"] = "let"
    name: str
    value: Expr


class Return(Stmt):
    stmt: Literal["return"] = "return"
    values: tuple[Expr, ...]


ForwardStmt = Annotated[Let | Return, Field(discriminator="stmt")]


class FParam(Node):
    name: str
    type: TypeExpr


class Forward(Stmt):
    params: tuple[FParam, ...] = ()
    returns: tuple[TypeExpr, ...] = ()
    returns_parenthesized: bool = False
    body: tuple[ForwardStmt, ...] = ()
    end_comments: tuple[str, ...] = ()


class LayerDecl(Stmt):
    decl: Literal["layer"] = "layer"
    kind: Literal["layer", "model"]
    name: str
    params: tuple[Param, ...] = ()
    has_params: bool = Field(default=True, description="Written with parentheses.")
    doc: str | None = None
    sublayers: tuple[SubLayer, ...] = ()
    forward: Forward | None = None
    end_comments: tuple[str, ...] = ()

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


# ------------------------------------------------------------------------------------ top level


class InputDecl(Stmt):
    decl: Literal["input"] = "input"
    name: str
    body: Body


class TaskDecl(Stmt):
    decl: Literal["task"] = "task"
    name: str
    body: Body


class ExperimentDecl(Stmt):
    decl: Literal["experiment"] = "experiment"
    name: str = Field(description="Dotted registry name, e.g. `lm.shakespeare.tiny`.")
    extends: str | None = None
    extends_span: Span | None = None
    body: Body


class SweepDecl(Stmt):
    """`sweep NAME { experiment = ...  metric = ...  space { ... } ... }`: a hyperparameter
    search over an experiment's values (`seqc.resolve.sweep`)."""

    decl: Literal["sweep"] = "sweep"
    name: str = Field(description="Dotted registry name, e.g. `lm.shakespeare.lr`.")
    body: Body


Decl = Annotated[
    InputDecl | LayerDecl | TaskDecl | ExperimentDecl | SweepDecl, Field(discriminator="decl")
]


class Import(Stmt):
    path: str


class SpecFile(Node):
    """One parsed .seq file."""

    path: str
    version: int
    header_comments: tuple[str, ...] = ()
    imports: tuple[Import, ...] = ()
    decls: tuple[Decl, ...] = ()
    end_comments: tuple[str, ...] = ()


N = TypeVar("N", bound=BaseModel)

_TEMPLATES: dict[type[BaseModel], dict[str, Any]] = {}
_new = object.__new__
_set = object.__setattr__


def trusted(cls: type[N], **fields: Any) -> N:
    """A node built from values its caller guarantees (the parser, the parse cache): no validation.

    What pydantic's `model_construct` does (defaults for the fields not given, in field order),
    without its per-field loop, which made it twice as slow as validating. IR from JSON or from a
    user goes through the validating constructor (`Span(...)`, `model_validate`) instead.
    """
    template = _TEMPLATES.get(cls)
    if template is None:
        template = _TEMPLATES[cls] = {
            name: None if f.is_required() else f.get_default(call_default_factory=True)
            for name, f in cls.model_fields.items()
        }
    node = _new(cls)
    _set(node, "__dict__", {**template, **fields})
    _set(node, "__pydantic_fields_set__", set(fields))
    _set(node, "__pydantic_extra__", None)
    _set(node, "__pydantic_private__", None)
    return node


_SPAN_FIELDS = frozenset(("file", "line", "col", "end_line", "end_col"))


def trusted_span(file: str, line: int, col: int, end_line: int, end_col: int) -> Span:
    """`trusted(Span, ...)` for the parser, which makes one per token and rule."""
    node = _new(Span)
    _set(
        node,
        "__dict__",
        {"file": file, "line": line, "col": col, "end_line": end_line, "end_col": end_col},
    )
    _set(node, "__pydantic_fields_set__", set(_SPAN_FIELDS))
    _set(node, "__pydantic_extra__", None)
    _set(node, "__pydantic_private__", None)
    return node


def trusted_copy(node: N, **update: Any) -> N:
    """`node.model_copy(update=update)` for a node built by `trusted` (no extra fields, no
    private attributes), without pydantic's generic copy: the parser copies thousands."""
    values = node.__dict__.copy()
    values.update(update)
    fields_set = set(node.__pydantic_fields_set__)
    fields_set.update(update)
    new = _new(type(node))
    _set(new, "__dict__", values)
    _set(new, "__pydantic_fields_set__", fields_set)
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new


def without_spans(data: Any) -> Any:
    """A model dump with every span removed: two IRs are the same program when these are equal."""
    if isinstance(data, BaseModel):
        data = data.model_dump()
    if isinstance(data, dict):
        return {k: without_spans(v) for k, v in data.items() if k not in ("span", "extends_span")}
    if isinstance(data, list | tuple):
        return [without_spans(v) for v in data]
    return data
