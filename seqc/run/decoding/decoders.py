"""The decoder a trained model decodes with: the fastest it has, chosen once per set of weights.

Why a module of its own: the choice looks at every decoder (step decoding, the backend's own,
the reference loop over the forward pass), so it sits above them all, and none of them imports
it back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from seqc.backends.api import Generator, Model
from seqc.run.decoding.ctc import PrefixBonus
from seqc.run.decoding.search import Decoder
from seqc.run.decoding.steps import StepDecoder


def decoder_for(model: Model, params: Any, bos: int, eos: int, pad: int) -> Generator:
    """The fastest decoder the model has: over the backend's encoder and decoder-step graphs with
    explicit caches (`step_decoder`: the encoder once, then one position per step), as the
    exported artifacts decode; else the backend's own (TF runs whole loops in one graph); else
    the reference loop over the compiled forward pass (`search.Decoder`). The params are read
    now: make the decoder after the weights it should use."""
    return (
        step_decoder(model, params, bos, eos, pad)
        or backend_decoder(model, params, bos, eos, pad)
        or Decoder(model, params, bos, eos, pad)
    )


def with_fusion(decoder: Generator, fusion: PrefixBonus) -> Generator:
    """`decoder` with shallow fusion in its beam search. The step decoder and the reference loop
    add the bonus themselves; a backend's own decoder runs its whole loop inside one graph (TF's
    `TfDecoder`), which cannot ask a Python LM at each step, so the reference loop over the same
    model and params decodes instead: the same search, slower. Without this the in-graph loop
    would decode as if no LM had been named."""
    if hasattr(decoder, "fusion"):  # a search on the host (`Decoder`, `StepDecoder`)
        decoder.fusion = fusion  # type: ignore[attr-defined]
        return decoder
    model, params = getattr(decoder, "model", None), getattr(decoder, "given_params", None)
    if model is None or params is None:
        from seqc.spec.errors import UsageError

        raise UsageError(
            f"this model decodes with {type(decoder).__name__}, which cannot fuse a language model",
            code="cannot-fuse",
            hint="decode without --lm, or export the model and decode the artifact with --lm",
        )
    bos, eos, pad = (getattr(decoder, k) for k in ("bos", "eos", "pad"))
    reference = Decoder(model, params, bos, eos, pad)
    reference.fusion = fusion
    return reference


def backend_decoder(model: Model, params: Any, bos: int, eos: int, pad: int) -> Generator | None:
    """The backend's own decoder (`Model.decoder`), or None."""
    return model.decoder(params, bos, eos, pad)


_PROGRAMS: dict[int, tuple[Any, Any, Any]] = {}
"""A task graph's step program and signature (by the graph's id, with the graph, so the id
stays its): the same program object at every evaluation of a run lets the backend keep what it
compiled for it (`Backend.step_functions`)."""


def step_decoder(model: Model, params: Any, bos: int, eos: int, pad: int) -> Generator | None:
    """A `StepDecoder` over the model's backend's step functions, or None for a model whose
    graph has no step form (a CTC model, a layer that needs the whole decoded sequence), or
    whose params are not plain arrays (tables kept on a parameter server).

    Why: the forward-pass loop recomputes every position at every step, O(T^2), and runs one
    compiled program per buffer length; the step graph computes one position against its
    caches, O(T), with the encoder run once per source rather than once per step."""
    from seqc.backends import registry
    from seqc.compiler.incremental import incremental, stepping_inputs
    from seqc.compiler.step_signature import StepSignature
    from seqc.spec.errors import SeqcError

    task = model.task
    if task.ctc:
        return None
    try:
        arrays = {k: np.asarray(v) for k, v in dict(params).items()}
    except (TypeError, ValueError):
        return None
    if any(a.dtype == object for a in arrays.values()):
        return None
    known = _PROGRAMS.get(id(task.graph))
    if known is None or known[0] is not task.graph:
        try:
            program = incremental(task.graph, stepping_inputs(task.graph))
        except SeqcError:
            return None
        known = (task.graph, program, StepSignature.of(program, task.fields))
        _PROGRAMS[id(task.graph)] = known
    _, program, sig = known
    fns = registry.backend(model.backend).step_functions(program, arrays)
    return StepDecoder(fns, sig, bos, eos, pad)
