"""Shared by the lowering tests: lower one built-in layer, run it on JAX, and numpy references.

The references at the end are float64 numpy written from the textbook definitions; none of them
calls seqc or JAX, so a test compares the lowering and the JAX ops against an independent account.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

import seqc.spec.catalogue  # noqa: F401  (fills the registry)
from seqc.backends.jax.ops import Ctx, run_graph
from seqc.compiler.compile import CompiledTask, compile_task
from seqc.compiler.graph import Graph, GraphBuilder, TensorType
from seqc.compiler.init import init_params
from seqc.compiler.lower import LOWERINGS
from seqc.compiler.lower.call import LayerCall
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.spec.kinds import REGISTRY

F32 = "float32"


def f32(*shape: int | str) -> TensorType:
    return TensorType(F32, tuple(shape))


def layer_args(kind: str, **args: Any) -> dict[str, Any]:
    """The catalogue's defaults for `kind`, overridden by `args` (what resolve would give)."""
    spec = REGISTRY.get("layer", kind)
    assert spec is not None, kind
    unknown = set(args) - set(spec.param_names)
    assert not unknown, unknown
    return {p.name: p.default for p in spec.params if not p.required} | args


def build(
    kind: str,
    inputs: list[TensorType],
    kw_inputs: dict[str, TensorType] | None = None,
    path: str = "l",
    **args: Any,
) -> Graph:
    """A graph of one built-in layer at `path`; its inputs are named x0, x1, ... and the kwargs."""
    b = GraphBuilder()
    b.layer = path
    xs = [b.input(f"x{i}", t) for i, t in enumerate(inputs)]
    kws = {k: b.input(k, t) for k, t in (kw_inputs or {}).items()}
    call = LayerCall(kind, path, layer_args(kind, **args), xs, kws)
    b.graph.outputs = [LOWERINGS[kind](b, call)]
    return b.graph


def compile_spec(
    path: Any, experiment: str, overrides: list[str] | None = None, symbols: dict | None = None
) -> CompiledTask:
    """The first task of an experiment of a spec file, compiled (no data read: give the data's
    figures, such as a character vocabulary's size, as `symbols`)."""
    program = load_program(path)
    resolved = resolve(program, experiment, overrides or [], symbols)
    return compile_task(program, resolved, resolved.tasks[0])


def params_of(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """`init_params` as float32 numpy; zero/one-initialised params (biases, norm gains) get
    noise added so that a test also sees them used."""
    rng = np.random.default_rng(seed + 100)
    out = {}
    for name, value in init_params(graph, seed).items():
        v = np.asarray(value, np.float32)
        if graph.params[name].init.kind in ("zeros", "ones"):
            v = v + rng.normal(0.0, 0.3, v.shape).astype(np.float32)
        out[name] = v
    return out


def run(
    graph: Graph,
    params: dict[str, np.ndarray],
    inputs: dict[str, np.ndarray],
    training: bool = False,
    seed: int = 0,
) -> np.ndarray:
    """The graph's first output as float64 numpy (computed in float32 by JAX)."""
    rng = jax.random.PRNGKey(seed) if training else None

    @jax.jit  # one XLA program per call: faster than dispatching op by op
    def forward(p: dict, xs: dict) -> jax.Array:
        return run_graph(graph, p, xs, Ctx(rng=rng, training=training))[0]

    return np.asarray(forward(params, inputs), np.float64)


def p64(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same param values, in float64, for a reference."""
    return {k: v.astype(np.float64) for k, v in params.items()}


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5) -> None:
    """Relative to the reference's scale: float32 results against a float64 reference."""
    assert got.shape == want.shape, (got.shape, want.shape)
    atol = rtol * max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def randn(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def directional_check(
    f: Callable[..., jax.Array],
    args: tuple,
    rng: np.random.Generator,
    eps: float,
    rtol: float,
    n: int = 3,
    atol: float = 0.0,
) -> tuple:
    """<grad f, v> against the central difference (f(a + eps v) - f(a - eps v)) / (2 eps) along
    `n` random directions v, all in float64 (JAX's x64 mode, on only for this check: turned on
    for a whole test it would also recompile `init_params` in 64-bit mode). `args` are pytrees
    of float64 numpy arrays; `f` must return a float64 scalar. Returns the grads, as numpy."""
    with jax.enable_x64(True):
        grad_fn = jax.jit(jax.grad(f, argnums=tuple(range(len(args)))))
        grads = jax.tree.map(np.asarray, grad_fn(*args))
        f = jax.jit(f)
        leaves, tree = jax.tree.flatten(args)
        assert f(*args).dtype == np.float64
        for _ in range(n):
            vs = [rng.standard_normal(a.shape) for a in leaves]
            analytic = sum(
                float(np.vdot(g, v)) for g, v in zip(jax.tree.leaves(grads), vs, strict=True)
            )
            plus = jax.tree.unflatten(tree, [a + eps * v for a, v in zip(leaves, vs, strict=True)])
            minus = jax.tree.unflatten(tree, [a - eps * v for a, v in zip(leaves, vs, strict=True)])
            numeric = (float(f(*plus)) - float(f(*minus))) / (2 * eps)
            bound = rtol * max(abs(analytic), 1e-3) + atol
            assert abs(analytic - numeric) <= bound, (analytic, numeric)
    return grads


# ------------------------------------------------------------------ numpy references (float64)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


_erf = np.vectorize(math.erf)


ACT = {
    "none": lambda x: x,
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),  # exact, not the tanh form
    "silu": lambda x: x * sigmoid(x),
    "tanh": np.tanh,
    "sigmoid": sigmoid,
}


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def lstm_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One sequence x [T, d_in] -> h [T, H]; gates in the order i, f, g, o; zero initial state."""
    hidden = u.shape[0]
    h, c = np.zeros(hidden), np.zeros(hidden)
    out = []
    for xt in x:
        z = xt @ w + b + h @ u
        i, f, g, o = (z[k * hidden : (k + 1) * hidden] for k in range(4))
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        out.append(h)
    return np.array(out).reshape(len(x), hidden)


def gru_ref(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, u: np.ndarray, bu: np.ndarray
) -> np.ndarray:
    """One sequence x [T, d_in] -> h [T, H]: the cuDNN/PyTorch GRU (reset gate applied to the
    recurrent product, which has its own bias); gates in the order r, z, n."""
    hidden = u.shape[0]
    h = np.zeros(hidden)
    out = []
    for xt in x:
        xi, hh = xt @ w + b, h @ u + bu
        r = sigmoid(xi[:hidden] + hh[:hidden])
        z = sigmoid(xi[hidden : 2 * hidden] + hh[hidden : 2 * hidden])
        n = np.tanh(xi[2 * hidden :] + r * hh[2 * hidden :])
        h = (1.0 - z) * n + z * h
        out.append(h)
    return np.array(out).reshape(len(x), hidden)
