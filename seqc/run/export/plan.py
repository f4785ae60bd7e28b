"""Which artifacts one `seqc export` builds: from the command line's formats and quantizations
or the spec's `export { ... }` block, each checked against what its format supports before
anything is built, and the folder each goes to.
"""

from __future__ import annotations

from typing import NamedTuple

from seqc.backends import registry
from seqc.run.session import Session
from seqc.spec.errors import UsageError
from seqc.spec.ir import Span


class Job(NamedTuple):
    """One artifact to build."""

    format: str
    quantize: str
    normalize: bool = True
    keep_float: tuple[str, ...] = ()
    """Layers left in float under int8 (TFLite; `seqc.backends.tflite.selective`)."""
    sentences: bool = False
    """Whether a language model's artifact carries its sentence scorer (ONNX)."""


KEEP_FLOAT_FORMATS = ("tflite",)
"""Formats whose int8 can leave named layers in float."""
SENTENCE_FORMATS = ("onnx",)
"""Formats that carry a language model's sentence scorer (`StepProgram.sequence`)."""


def plan(
    formats: list[str],
    quantize: list[str],
    normalize: bool = True,
    keep_float: tuple[str, ...] = (),
    span: Span | None = None,
    sentences: bool = False,
) -> list[Job]:
    """The artifacts to build; a pair a format has no mode for is an error. `keep_float` goes
    to the TFLite int8 artifacts among them, and is an error when there is none (`span`:
    where the spec said it); `sentences` goes to the ONNX artifacts, an error without one."""
    out = []
    for f in formats:
        modes = registry.artifact_format(registry.check_format(f)).quantize
        for q in quantize:
            if q not in modes:
                raise UsageError(
                    f"format `{f}` has no `{q}` quantization",
                    code="bad-quantize",
                    expected=", ".join(modes),
                    found=q,
                )
            if not normalize and f not in SCORING_FORMATS:
                raise UsageError(
                    f"format `{f}` exports the logits only; --no-normalize is for "
                    f"{' and '.join(SCORING_FORMATS)}",
                    code="bad-normalize",
                )
            kept = f in KEEP_FLOAT_FORMATS and q == "int8"
            scorer = sentences and f in SENTENCE_FORMATS
            out.append(Job(f, q, normalize, tuple(keep_float) if kept else (), scorer))
    if keep_float and not any(job.keep_float for job in out):
        raise UsageError(
            f"keep_float leaves layers in float under int8 quantization of "
            f"{' and '.join(KEEP_FLOAT_FORMATS)}; no artifact asked for here has it",
            span=span,
            code="bad-keep-float",
            hint='use it with tflite(quantize = "int8") (--format tflite --quantize int8), or '
            "drop it",
        )
    if sentences and not any(job.sentences for job in out):
        raise UsageError(
            f"--sentences adds a language model's sentence scorer to "
            f"{' and '.join(SENTENCE_FORMATS)} artifacts; no artifact asked for here is one",
            span=span,
            code="bad-sentences",
            hint="use it with --format onnx, or drop it",
        )
    return out


SCORING_FORMATS = ("onnx", "tflite")
"""Formats that take `normalize = false` (a scoring artifact)."""


def from_spec(session: Session) -> list[Job]:
    """The artifacts the experiment's `export { ... }` block lists, each with its own
    quantization and normalization; none when it lists none."""
    out = []
    span = session.resolved.span("export.formats")
    for call in session.resolved.config["export"]["formats"]:
        q = str(call.args.get("quantize", "none"))
        keep = tuple(str(x) for x in call.args.get("keep_float", ()))
        norm = bool(call.args.get("normalize", True))
        out += plan([call.kind], [q], norm, keep, span, bool(call.args.get("sentences", False)))
    for job in out:
        check_layers(session, job.keep_float, span)
    return out


def check_layers(session: Session, layers: tuple[str, ...], span: Span | None = None) -> None:
    """Every name in `layers` is a layer of the task's model (a path such as `frontend` or
    `encoder.0`, as `seqc show --graph` lists them)."""
    known = {op.layer for op in session.graph.ops if op.layer}
    for name in layers:
        if not any(k == name or k.startswith(f"{name}.") for k in known):
            tops = sorted({k.split(".")[0] for k in known})
            raise UsageError(
                f"keep_float names `{name}`, which is no layer of task `{session.task}`'s model",
                span=span,
                code="unknown-layer",
                expected=", ".join(tops[:12]),
                found=name,
            )


def folder_name(job: Job) -> str:
    name = f"{job.format}-{job.quantize}" if job.normalize else f"{job.format}-{job.quantize}-score"
    return f"{name}-float-{'-'.join(job.keep_float)}" if job.keep_float else name
