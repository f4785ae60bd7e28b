"""Incremental decoding: split a model's op graph into an encoder and a decoder step with caches.

Why a compiler pass: a deployed sequence model decodes one token at a time, and recomputing the
whole prefix at every step costs O(T^2) layers of work. The step graph computes only the new
position and carries what later positions need (attention keys and values, recurrent state) in
explicit cache tensors that are inputs and outputs, so any runtime (onnxruntime, LiteRT, a
backend's interpreter) can run the loop. Deriving it from the op graph, rather than writing a
second lowering per layer kind, keeps one source of truth: the step graph is the forward graph
with each op rewritten for one position, and parity is tested position by position.

The rewrite follows the decoding time axis through the graph. Every value derived from the
stepping inputs (`ids`, `tgt`) has at most one *query* time axis (the new position, size 1 in the
step graph) and any number of *key* time axes (the history, length `L`, read from a cache). An
op that needs the history of a value (the key or value operand of attention, a key padding mask)
reads it from a cache into which the new position is written at `pos`. Values that do not depend
on the stepping inputs but on the other inputs (`src`, `src_mask`) form the encoder graph; the
step graph receives the ones it reads as inputs named `enc<i>`. Recurrences (`scan`) run their
body once per step with their carries in caches.

What cannot be decoded step by step is an error naming the layer: attention over future
positions (not causal), a backward recurrence, a reduction or convolution along decoding time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from seqc.compiler.graph import COMPARE, LOGICAL, UNARY, Graph, Op, Shape, TensorType
from seqc.compiler.signature import input_fields
from seqc.spec.errors import CheckError

HISTORY = "L"
"""The cache length symbol of the step graph: the decoding buffer, chosen by the runtime."""

POS = "pos"
"""The step graph's int32 scalar input: the position being decoded (0 for the first token)."""

STEPPING_FIELDS = ("inputs", "tgt_in", "tgt_mask", "mask")
"""Batch fields (see `seqc.compiler.signature`) that grow by one token per decoding step."""

POINTWISE = UNARY | {"cast", "dropout"}
"""Ops that act on each element alone: a position's output depends on that position only."""

ARITHMETIC = {"add", "sub", "mul", "div", "maximum", "minimum"}


@dataclass
class Cache:
    """One cache tensor: `cache<i>` in, `cache<i>` out (same type), zeros before step 0."""

    name: str
    type: TensorType
    layer: str
    kind: str
    """"history" (one slot per position, written at `pos`) or "state" (replaced each step)."""


@dataclass
class StepProgram:
    """An encoder graph (None for a language model) and a one-position decoder step graph;
    or, for a model that is not decoded token by token (`whole_graph`: a CTC model), the whole
    forward graph as the encoder and no step graph."""

    encoder: Graph | None
    step: Graph | None
    stepping: list[str]
    """The step graph's token inputs (each [B, 1]), by forward input name."""
    encoder_outputs: list[str] = field(default_factory=list)
    caches: list[Cache] = field(default_factory=list)
    time_symbol: str = "T"
    batch_symbol: str = "B"
    output: str = "logits"
    """The step's first output: `logits` [B, 1, vocab], or a scoring graph's `score` [B, 1]
    (`seqc.compiler.scoring`)."""
    sequence: Graph | None = None
    """A language model's whole-sentence scorer (`seqc.compiler.scoring.sequence_graph`): the
    forward inputs and `next` [B, T] in, the score of each next token [B, T] out; None for a
    model whose artifacts score by steps alone."""

    @property
    def encoder_only(self) -> bool:
        """True for a program run in one pass (`whole_graph`): its encoder's output is the
        answer, and there is nothing to step."""
        return self.step is None

    @property
    def step_outputs(self) -> list[str]:
        """The output (`logits`) and `next_<cache>` for each cache (an ONNX value has one
        name, so an output cannot reuse its input's); none without a step graph."""
        if self.step is None:
            return []
        return [self.output, *(f"next_{c.name}" for c in self.caches)]


@dataclass(frozen=True)
class _Status:
    """Where decoding time lives in a value: its query axis and its key (history) axes.

    `open` are the key axes that still include slots after `pos` (a history read is open until
    a causal mask hides the future); a softmax over an open axis would attend to positions not
    decoded yet, which is what a non-causal decoder does. `causal` marks the key axes a mask
    value hides the future on."""

    q: int | None = None
    k: tuple[int, ...] = ()
    open: tuple[int, ...] = ()
    causal: tuple[int, ...] = ()

    @property
    def stepping(self) -> bool:
        return self.q is not None or bool(self.k)

    def map(self, f: Callable[[int], int | None]) -> _Status:
        """The status after an op that moves axes (transpose, reduce, broadcast)."""

        def many(axes: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(sorted(a for a in (f(x) for x in axes) if a is not None))

        return _Status(
            None if self.q is None else f(self.q), many(self.k), many(self.open), many(self.causal)
        )


_STATIC = _Status()


class _Rewriter:
    def __init__(self, graph: Graph, stepping: list[str]) -> None:
        self.g = graph
        self.stepping = stepping
        self.step = Graph()
        self.step.params = dict(graph.params)
        self.step.subgraphs = {}
        self.enc = Graph()
        self.enc.params = dict(graph.params)
        self.enc.subgraphs = dict(graph.subgraphs)
        self.encoder_used = False
        self.new: dict[int, int] = {}  # forward value -> step value
        self.status: dict[int, _Status] = {}
        self.history: dict[int, int] = {}  # forward value -> step value of its history
        self.enc_new: dict[int, int] = {}  # forward value -> encoder value
        self.enc_inputs: dict[int, int] = {}  # forward value -> step input `enc<i>`
        self.caches: list[Cache] = []
        self.cache_out: list[int] = []
        self.pos: int | None = None
        self.carrier: int | None = None  # a step value with an L axis, for iotas over L
        self.time = self._time_symbol()
        self.deps = self._input_dependence()

    # ------------------------------------------------------------------ analysis
    def _input_dependence(self) -> list[str]:
        """Per forward value: "step" (reads a stepping input), "enc" (reads only other
        inputs) or "const" (params, constants: reads no input)."""
        out: list[str] = []
        for op in self.g.ops:
            if op.kind == "input":
                out.append("step" if op.attrs["name"] in self.stepping else "enc")
                continue
            kinds = {out[i] for i in op.inputs}
            if op.kind == "fill" and self.time in op.type.shape:
                kinds.add("step")  # a value shaped by decoding time (an all-ones mask)
            out.append("step" if "step" in kinds else "enc" if "enc" in kinds else "const")
        return out

    def _time_symbol(self) -> str:
        first = self.g.ops[self.g.inputs[self.stepping[0]]]
        sym = first.type.shape[1] if first.type.rank >= 2 else None
        if not isinstance(sym, str):
            raise self._error(first, "the decoded input needs a symbolic length, as in int32[B, T]")
        for name, vid in self.g.inputs.items():
            if name not in self.stepping and sym in self.g.ops[vid].type.shape:
                raise self._error(
                    self.g.ops[vid],
                    f"input `{name}` shares the length `{sym}` of the decoded input; give the "
                    "source its own length symbol (src: int32[B, S])",
                )
        return sym

    def _error(self, op: Op, message: str) -> CheckError:
        where = f"`{op.layer}`: " if op.layer else ""
        return CheckError(
            f"{where}{message}",
            span=op.span,
            code="not-incremental",
            hint="step-by-step decoding (export, artifact decoding) needs a causal decoder",
        )

    # ------------------------------------------------------------------ emitting
    def _emit(self, kind: str, inputs: tuple[int, ...], attrs: dict, t: TensorType, op: Op) -> int:
        vid = len(self.step.ops)
        self.step.ops.append(Op(vid, kind, inputs, attrs, t, op.layer, op.span))
        return vid

    def _input(self, name: str, t: TensorType, op: Op) -> int:
        vid = self._emit("input", (), {"name": name}, t, op)
        self.step.inputs[name] = vid
        return vid

    def _pos(self, op: Op) -> int:
        if self.pos is None:
            self.pos = self._input(POS, TensorType("int32", ()), op)
        return self.pos

    def _shape(self, shape: Shape, st: _Status) -> Shape:
        return tuple(1 if i == st.q else HISTORY if i in st.k else d for i, d in enumerate(shape))

    def _type(self, op: Op, st: _Status) -> TensorType:
        return TensorType(op.type.dtype, self._shape(op.type.shape, st))

    def static(self, vid: int, at: Op) -> int:
        """A value that does not change while decoding, made available in the step graph."""
        if vid in self.new:
            return self.new[vid]
        op = self.g.ops[vid]
        if self.deps[vid] == "enc":
            if vid not in self.enc_inputs:
                name = f"enc{len(self.enc_inputs)}"
                self.enc_inputs[vid] = self._input(name, op.type, op)
                self.encoder_used = True
            return self.enc_inputs[vid]
        inputs = tuple(self.static(i, at) for i in op.inputs)
        if op.kind == "scan":
            raise self._error(op, "a recurrence over constants cannot be decoded")
        self.new[vid] = self._emit(op.kind, inputs, dict(op.attrs), op.type, op)
        self.status[vid] = _STATIC
        return self.new[vid]

    def value(self, vid: int, at: Op) -> tuple[int, _Status]:
        if self.deps[vid] != "step":
            return self.static(vid, at), _STATIC
        return self.new[vid], self.status[vid]

    def history_of(self, vid: int, at: Op) -> tuple[int, _Status]:
        """The value over all positions so far: a cache with the new position written at `pos`."""
        if vid in self.history:
            axis = self.status[vid].q
            assert axis is not None
            return self.history[vid], _Status(k=(axis,), open=(axis,))
        cur, st = self.new[vid], self.status[vid]
        if st.q is None or st.k:
            raise self._error(at, "needs the history of a value that is not one position")
        op = self.g.ops[vid]
        hist = _Status(k=(st.q,), open=(st.q,))
        t = self._type(op, hist)
        name = f"cache{len(self.caches)}"
        cache_in = self._input(name, t, op)
        self.caches.append(Cache(name, t, op.layer, "history"))
        axis = st.q
        idx = self._emit("iota", (cache_in,), {"axis": axis}, TensorType("int32", (HISTORY,)), op)
        here = self._emit("equal", (idx, self._pos(op)), {}, TensorType("bool", (HISTORY,)), op)
        shape = tuple(HISTORY if i == axis else 1 for i in range(t.rank))
        here = self._emit("reshape", (here,), {"shape": shape}, TensorType("bool", shape), op)
        out = self._emit("where", (here, cur, cache_in), {}, t, op)
        self.cache_out.append(out)
        self.history[vid] = out
        self.carrier = self.carrier if self.carrier is not None else cache_in
        return out, hist

    # ------------------------------------------------------------------ the walk
    def run(self) -> StepProgram:
        for op in self.g.ops:
            if self.deps[op.id] != "step":
                if self.deps[op.id] == "enc":
                    self._encoder_op(op)
                continue
            vid, st = self._rewrite(op)
            self.new[op.id], self.status[op.id] = vid, st
        (out,) = self.g.outputs
        logits, st = self.value(out, self.g.ops[out])
        if st.k or st.q != 1:
            raise self._error(self.g.ops[out], "the output must be [B, T, vocab] per position")
        self.step.outputs = [logits, *self.cache_out]
        encoder = None
        outputs = []
        if self.encoder_used:
            encoder = self.enc
            for vid in self.enc_inputs:
                encoder.outputs.append(self.enc_new[vid])
                outputs.append(self.step.ops[self.enc_inputs[vid]].attrs["name"])
        batch = self.g.ops[self.g.inputs[self.stepping[0]]].type.shape[0]
        return StepProgram(
            encoder, self.step, self.stepping, outputs, self.caches, self.time, str(batch)
        )

    def _encoder_op(self, op: Op) -> None:
        """Copy an encoder-side op (and the constants it reads) into the encoder graph."""

        def copy(vid: int) -> int:
            if vid in self.enc_new:
                return self.enc_new[vid]
            o = self.g.ops[vid]
            ins = tuple(copy(i) for i in o.inputs)
            new = len(self.enc.ops)
            self.enc.ops.append(Op(new, o.kind, ins, dict(o.attrs), o.type, o.layer, o.span))
            if o.kind == "input":
                self.enc.inputs[o.attrs["name"]] = new
            self.enc_new[vid] = new
            return new

        copy(op.id)

    def _rewrite(self, op: Op) -> tuple[int, _Status]:
        k = op.kind
        if k == "input":
            st = _Status(q=1)
            return self._input(op.attrs["name"], self._type(op, st), op), st
        if k == "fill":
            axis = op.type.shape.index(self.time)
            st = _Status(q=axis)
            attrs = dict(op.attrs, shape=self._shape(op.attrs["shape"], st))
            return self._emit(k, (), attrs, self._type(op, st), op), st
        if k == "iota":
            return self._iota(op)
        if k == "causal_mask":
            return self._causal(op)
        if k == "scan":
            return self._scan(op)
        if k == "einsum":
            return self._einsum(op)
        if k in ("matmul", "batched_matmul", "sinusoid") or k in POINTWISE:
            return self._same(op)
        if k in ("softmax", "log_softmax", "layer_norm"):
            return self._along(op, op.attrs.get("axis", -1))
        if k == "gather":
            return self._gather(op)
        if k == "reshape":
            return self._reshape(op)
        if k == "transpose":
            return self._transpose(op)
        if k in ("slice", "concat"):
            return self._along(op, op.attrs["axis"])
        if k.startswith("reduce_"):
            return self._reduce(op)
        if k == "argmax":
            return self._argmax(op)
        if k == "where" or k in COMPARE or k in LOGICAL or k in ARITHMETIC:
            return self._broadcast(op)
        raise self._error(op, f"`{k}` along the decoding axis has no step form")

    def _same(self, op: Op) -> tuple[int, _Status]:
        """Ops that act on each position alone: the first operand's status carries over."""
        ins = [self.value(i, op) for i in op.inputs]
        st = ins[0][1]
        if op.kind in ("matmul", "batched_matmul"):
            inner = {op.type.rank - 1} | (
                {op.type.rank - 2} if op.kind == "batched_matmul" else set()
            )
            if st.q in inner or inner & set(st.k) or any(s.stepping for _, s in ins[1:]):
                raise self._error(op, "a product along the decoding axis")
        ids = tuple(v for v, _ in ins)
        return self._emit(op.kind, ids, dict(op.attrs), self._type(op, st), op), st

    def _along(self, op: Op, axis: int) -> tuple[int, _Status]:
        """Softmax, norms, slices, concats: fine unless they act along the query axis."""
        ins = [self.value(i, op) for i in op.inputs]
        st = next((s for _, s in ins if s.stepping), _STATIC)
        axis = axis % op.type.rank if op.type.rank else 0
        if st.q == axis:
            raise self._error(op, f"`{op.kind}` along the decoding axis")
        if axis in st.open:
            raise self._error(
                op,
                "attention over positions not decoded yet (it is not causal); only a causal "
                "decoder can decode step by step",
            )
        if op.kind == "concat" and len({s for _, s in ins}) > 1:
            raise self._error(op, "a concat of decoded and fixed values")
        ids = tuple(v for v, _ in ins)
        return self._emit(op.kind, ids, dict(op.attrs), self._type(op, st), op), st

    def _reduce(self, op: Op) -> tuple[int, _Status]:
        x, st = self.value(op.inputs[0], op)
        axes = op.attrs["axes"]
        if st.q in axes or set(st.k) & set(axes):
            raise self._error(op, "a reduction along the decoding axis")
        keep = op.attrs["keepdims"]

        def moved(a: int) -> int:
            return a if keep else a - sum(1 for r in axes if r < a)

        new = st.map(moved)
        return self._emit(op.kind, (x,), dict(op.attrs), self._type(op, new), op), new

    def _argmax(self, op: Op) -> tuple[int, _Status]:
        """The largest entry's index along the last axis (a router's choice of expert): one
        position's own values, unless that axis is decoding time."""
        x, st = self.value(op.inputs[0], op)
        last = self.g.ops[op.inputs[0]].type.rank - 1
        if st.q == last or last in st.k:
            raise self._error(op, "an argmax along the decoding axis")
        return self._emit(op.kind, (x,), dict(op.attrs), self._type(op, st), op), st

    def _gather(self, op: Op) -> tuple[int, _Status]:
        table, st_t = self.value(op.inputs[0], op)
        ids, st = self.value(op.inputs[1], op)
        if st_t.stepping:
            raise self._error(op, "a gather from a decoded table")
        axis = int(op.attrs.get("axis", 0))  # the ids' axes land at `axis` of the result
        new = st.map(lambda a: a + axis)
        return self._emit("gather", (table, ids), dict(op.attrs), self._type(op, new), op), new

    def _transpose(self, op: Op) -> tuple[int, _Status]:
        x, st = self.value(op.inputs[0], op)
        perm = list(op.attrs["perm"])
        new = st.map(perm.index)
        return self._emit("transpose", (x,), dict(op.attrs), self._type(op, new), op), new

    def _reshape(self, op: Op) -> tuple[int, _Status]:
        x, st = self.value(op.inputs[0], op)
        target = op.attrs["shape"]
        where = [i for i, d in enumerate(target) if d == self.time]
        if st.q is not None and st.k:
            raise self._error(op, "a reshape of a value with both new and past positions")
        if len(where) != (1 if st.stepping else 0) and st.stepping:
            raise self._error(op, "a reshape that moves the decoding axis out of sight")
        if st.q is not None:
            new = _Status(where[0])
        else:  # history axes keep their order; open and causal follow them
            old = {a: where[n] for n, a in enumerate(st.k)} if len(where) == len(st.k) else None
            if old is None:
                raise self._error(op, "a reshape that merges past positions")
            new = st.map(old.get)
        attrs = dict(op.attrs, shape=self._shape(target, new))
        return self._emit("reshape", (x,), attrs, self._type(op, new), op), new

    def _iota(self, op: Op) -> tuple[int, _Status]:
        like, st = self.value(op.inputs[0], op)
        axis = op.attrs["axis"]
        if st.q == axis:  # positions of the new token: [pos]
            st = _Status(q=0)
            pos = self._pos(op)
            t = TensorType("int32", (1,))
            return self._emit("reshape", (pos,), {"shape": (1,)}, t, op), st
        if axis in st.k:
            t = TensorType("int32", (HISTORY,))
            return self._emit("iota", (like,), dict(op.attrs), t, op), _Status(k=(0,), open=(0,))
        raise self._error(op, "positions along an axis that is not decoding time")

    def _causal(self, op: Op) -> tuple[int, _Status]:
        """Row `pos` of the causal mask over the history: slot j is visible when j <= pos."""
        _, st = self.value(op.inputs[0], op)
        if st.q != op.attrs["axis"]:
            raise self._error(op, "a causal mask along an axis that is not decoding time")
        if self.carrier is None:
            raise self._error(op, "a causal mask before any attention history exists")
        t_l = TensorType("int32", (HISTORY,))
        idx = self._emit("iota", (self.carrier,), {"axis": self._carrier_axis()}, t_l, op)
        visible = self._emit(
            "less_equal", (idx, self._pos(op)), {}, TensorType("bool", (HISTORY,)), op
        )
        t = TensorType("bool", (1, HISTORY))
        out = self._emit("reshape", (visible,), {"shape": (1, HISTORY)}, t, op)
        return out, _Status(q=0, k=(1,), causal=(1,))

    def _carrier_axis(self) -> int:
        assert self.carrier is not None
        return self.step.ops[self.carrier].type.shape.index(HISTORY)

    def _einsum(self, op: Op) -> tuple[int, _Status]:
        """Attention's two products. The first operand sets the query letter; a second operand
        that is decoded along another letter is read over its history (keys, values)."""
        lhs, out = op.attrs["equation"].split("->")
        specs = lhs.split(",")
        (a, sa), (b, sb) = (self.value(i, op) for i in op.inputs)
        q_letter = specs[0][sa.q] if sa.q is not None else None
        k_letters = {specs[0][i] for i in sa.k}
        if sb.q is not None:
            letter = specs[1][sb.q]
            if (q_letter is not None and letter != q_letter) or letter in k_letters:
                b, sb = self.history_of(op.inputs[1], op)
        pairs = list(zip(specs, (sa, sb), strict=True))
        letters_q = {s[st.q] for s, st in pairs if st.q is not None}
        letters_k = {s[i] for s, st in pairs for i in st.k}
        if len(letters_q) > 1 or (letters_q & letters_k):
            raise self._error(op, "a product mixing new positions with each other")
        if letters_q - set(out):
            raise self._error(op, "a sum over new positions")
        # A key letter is still open when every operand that has it has it open.
        masked = {s[i] for s, st in pairs for i in st.k if i not in st.open}
        still_open = letters_k - masked
        if still_open - set(out):
            raise self._error(
                op,
                "a sum over positions not decoded yet (it is not causal); only a causal decoder "
                "can decode step by step",
            )
        st = _Status(
            next((out.index(c) for c in letters_q), None),
            tuple(sorted(out.index(c) for c in letters_k if c in out)),
            tuple(sorted(out.index(c) for c in still_open if c in out)),
        )
        attrs = dict(op.attrs)
        return self._emit("einsum", (a, b), attrs, self._type(op, st), op), st

    def _broadcast(self, op: Op) -> tuple[int, _Status]:
        """Elementwise ops with broadcasting: a new-position operand aligned with another
        operand's history axis is itself read over its history (a key padding mask)."""
        rank = op.type.rank
        ins = [self.value(i, op) for i in op.inputs]

        def aligned(st: _Status, r: int) -> _Status:
            return st.map(lambda a: a + rank - r)

        ranks = [self.g.ops[i].type.rank for i in op.inputs]
        keys = {a for (_, s), r in zip(ins, ranks, strict=True) for a in aligned(s, r).k}
        for n, ((_, s), r) in enumerate(zip(ins, ranks, strict=True)):
            if s.q is not None and aligned(s, r).q in keys:
                ins[n] = self.history_of(op.inputs[n], op)
        qs = {aligned(s, r).q for (_, s), r in zip(ins, ranks, strict=True) if s.q is not None}
        ks = {a for (_, s), r in zip(ins, ranks, strict=True) for a in aligned(s, r).k}
        if len(qs) > 1:
            raise self._error(op, "an elementwise op across two decoding axes")
        parts = [aligned(s, r) for (_, s), r in zip(ins, ranks, strict=True)]
        opened = {a for p in parts for a in p.open}
        causal = {a for p in parts for a in p.causal}
        if op.kind == "where":  # where(mask, scores, -inf): the mask's causal axes close
            opened -= set(parts[0].causal)
            causal = set()
        elif op.kind not in LOGICAL:
            causal = set()
        st = _Status(
            next(iter(qs), None), tuple(sorted(ks)), tuple(sorted(opened)), tuple(sorted(causal))
        )
        ids = tuple(v for v, _ in ins)
        return self._emit(op.kind, ids, dict(op.attrs), self._type(op, st), op), st

    def _scan(self, op: Op) -> tuple[int, _Status]:
        """One step of a recurrence; its carries live in `state` caches."""
        n_xs = op.attrs["n_xs"]
        if op.attrs["reverse"]:
            raise self._error(op, "a backward recurrence over the decoded sequence")
        xs = [self.value(i, op) for i in op.inputs[:n_xs]]
        if any(st.q != 1 or st.k for _, st in xs):
            raise self._error(op, "a recurrence whose inputs are not decoded step by step")
        for c in op.inputs[n_xs:]:
            init = self.g.ops[c]
            if init.kind != "fill" or init.attrs["value"] != 0.0:
                raise self._error(op, "a recurrence whose initial state is not zeros")
        body = self.g.subgraphs[op.attrs["body"]]
        env: dict[int, int] = {}
        for name, vid in body.inputs.items():
            t = body.ops[vid].type
            if name.startswith("x"):
                v, _ = xs[int(name[1:])]
                src = self.step.ops[v].type
                sliced = self._emit(
                    "reshape", (v,), {"shape": t.shape}, TensorType(src.dtype, t.shape), op
                )
                env[vid] = sliced
            else:
                cname = f"cache{len(self.caches)}"
                env[vid] = self._input(cname, t, op)
                self.caches.append(Cache(cname, t, op.layer, "state"))
        for bop in body.ops:
            if bop.kind == "input":
                continue
            ins = tuple(env[i] for i in bop.inputs)
            env[bop.id] = self._emit(bop.kind, ins, dict(bop.attrs), bop.type, bop)
        y, *carries = (env[o] for o in body.outputs)
        self.cache_out.extend(carries)
        st = _Status(q=1)
        t = self._type(op, st)
        return self._emit("reshape", (y,), {"shape": t.shape}, t, op), st


def incremental(graph: Graph, stepping: list[str], output: str = "logits") -> StepProgram:
    """The encoder and decoder-step graphs of `graph`, decoding along `stepping` inputs; the
    step's first output is named `output`."""
    if not stepping:
        raise CheckError("the model has no decoded input", code="not-incremental")
    program = _Rewriter(graph, stepping).run()
    program.output = output
    return program


def whole_graph(graph: Graph, output: str = "logits") -> StepProgram:
    """The program of a model that runs in one pass over its whole input, with nothing decoded
    token by token: a CTC model (audio in, frame logits out, decoded on the host). Its encoder
    is the forward graph itself, whose one output is named `output`, and it has no step graph.

    Why a `StepProgram` rather than a second kind of program: the artifact formats, their
    manifests and runtimes already build, describe and run an encoder graph; a model without a
    step is that encoder alone, so every format exports it with no second code path."""
    if len(graph.outputs) != 1:
        raise CheckError(
            f"a model exported in one pass has one output; this one has {len(graph.outputs)}",
            code="not-incremental",
        )
    batch = next(
        (str(graph.ops[v].type.shape[0]) for v in graph.inputs.values() if graph.ops[v].type.rank),
        "B",
    )
    return StepProgram(graph, None, [], [output], batch_symbol=batch, output=output)


def stepping_inputs(graph: Graph) -> list[str]:
    """The forward inputs fed by fields that grow while decoding (`ids`, `tgt`, ...)."""
    fields = input_fields(graph)
    return [name for name, f in fields.items() if f in STEPPING_FIELDS]
