"""TFLite (LiteRT) flatbuffers from the TF backend's SavedModel, in four precisions.

Why from the SavedModel: it is the TF backend's deployment artifact (`seqc.backends.tf.savedmodel`),
so the TFLite model serves exactly the signatures TF Serving does, by the same keys and input
names, with B and T left dynamic. Any SavedModel works, whatever its signatures (a forward pass,
an encoder, a decoder step with cache tensors in and out); signatures are picked by key.

The converter is held to TFLite *builtin* ops only: the `ai_edge_litert` interpreter we run with
has no Flex (select TF ops) delegate and does not register TFLite's custom tensor-list kernels, so
a model needing either would convert and then fail to load. A graph the builtins cannot express
fails here instead, as a `TfliteConversionError` naming the op and the signature.

The four modes (`QUANTIZE`):

- ``"none"``: float32 weights and compute.
- ``"dynamic"``: dynamic-range quantization. Fully-connected weights (of at least 1024
  elements) are stored int8 and run by hybrid kernels that quantize the float32 activations on
  the fly per call; gathered tables (embeddings, positions) are stored int8 and dequantized once
  at load; matmuls of two activations (attention) stay float32. About 3-4x smaller, no
  calibration, logits within about 1-2% of float32.
- ``"fp16"``: weights stored float16, dequantized to float32 at load; compute stays float32.
  About 2x smaller, accuracy close to float32.
- ``"int8"``: full integer quantization, calibrated on the `representative` feeds. Weights are
  int8 (per channel for fully-connected/matmul), biases int32, activations int8. There is no
  *silent* float fallback: the converter is asked for the int8 op set, and since it still
  leaves an op without an int8 kernel in float32 without a word, the result is checked
  (`flatbuffer.float_compute`) and such an op is a conversion error, never a silently float op.
  Float is what the caller asks for by name: `keep_float` layers stay float32 (a speech front
  end, see `seqc.backends.tflite.selective`). Float arithmetic on lengths alone (the angles,
  sin and cos of rotary positions) is allowed, and kept float on purpose: it has no activation
  range, and an int8 angle would lose the positions (`selective.shape_nodes`).
  What is not int8, by design: integer and bool tensors (token ids, masks, positions, loop
  counters) are not quantized, and int32 id inputs stay int32 (an id is an index, not a value
  with a range); float inputs and outputs keep a float32 interface (a quantize op at the entry,
  a dequantize op at the exit), so callers feed and read the dtypes of the float model, and
  logits come back float32 with int8 resolution; a recurrent loop's carried state and output
  buffer cross the WHILE op's boundary as float32 (the body quantizes them on entry and
  dequantizes on exit; all its arithmetic is int8). Ranges come from calibration, so calibrate
  on the batch sizes and lengths served: a gathered table (sinusoidal positions) is stored with
  the range of the rows calibration read, once per use. Attention masks written as a -1e9
  score (`seqc.compiler.lower.attention.NEG_INF`) make the int8 range of the softmax input
  [-1e9, max], so real scores collapse to a step or two: Transformer int8 logits are coarse
  (tests/backends/test_tflite_convert.py has the numbers) until the mask is a moderate value.

Recurrent layers: their scan (`seqc.backends.tf.scan`) is a `tf.while_loop` writing a
TensorArray. The WHILE loop itself becomes a builtin, but TFLite lowers TensorArray ops to
builtins only when the element shape is static: with no element shape it fails ("requires
element_shape to be 1D tensor"), and with [None, d] ("requires element_shape to be static");
`_experimental_default_to_single_batch_in_tensor_list_ops` bakes batch 1 in (B=2 then fails at
run time), `legalize_custom_tensor_list_ops` emits custom TensorList ops `ai_edge_litert` does
not resolve, and SELECT_TF_OPS needs Flex. So no converter setting serves a dynamic batch; the
scan must collect its outputs without a TensorArray (concatenating them in the loop converts to
builtins, runs in every mode, and matches TF to 5e-7). Until then such a model fails here with
that explanation (see `_hint`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from seqc.backends.tf.scopes import in_layers, in_signal
from seqc.backends.tflite.flatbuffer import Op, float_compute
from seqc.backends.tflite.selective import (
    layer_nodes,
    quantize_except,
    shape_nodes,
    signal_nodes,
)
from seqc.backends.tflite.tied import share_tied_tables
from seqc.spec.errors import ExportError

QUANTIZE = ("none", "dynamic", "fp16", "int8")

Feeds = dict[str, np.ndarray]
# A sample is the inputs by name (fed to every converted signature that takes all of them), or
# (signature key, inputs) for a signature whose inputs are not in the dev data (a decoder step's
# cache, produced by running the encoder).
Sample = Feeds | tuple[str, Feeds]
Representative = Callable[[], Iterable[Sample]]
Samples = Callable[[], Iterator[tuple[str, Feeds]]]  # the converter's representative_dataset


@dataclass
class TfliteConversionError(ExportError):
    """A SavedModel that could not be turned into a TFLite model, said in a few lines.

    `signature` and `ops` name what failed (when the converter says); `details` keeps the
    converter's own text for whoever needs the full story.
    """

    code: str = "tflite-conversion"
    signature: str | None = None
    ops: tuple[str, ...] = ()
    details: str = ""


def signature_inputs(saved_model_dir: Path) -> dict[str, dict[str, tf.TensorSpec]]:
    """Each signature's inputs by name, read from `saved_model.pb` without loading the model.

    Shapes have `None` where the signature leaves a dim unknown."""
    saved_model_dir = Path(saved_model_dir)
    pb = saved_model_dir / "saved_model.pb"
    if not pb.is_file():
        where = "does not exist" if not saved_model_dir.exists() else "has no saved_model.pb"
        raise TfliteConversionError(
            f"{saved_model_dir}: not a SavedModel (the folder {where}); expected the folder "
            "written by `seqc.backends.tf.savedmodel.export_savedmodel` "
            "(`seqc export --format savedmodel`)"
        )
    proto = saved_model_pb2.SavedModel()
    try:
        proto.ParseFromString(pb.read_bytes())
    except Exception as e:  # protobuf's DecodeError has no stable import path
        raise TfliteConversionError(f"{pb}: unreadable SavedModel ({e})") from e
    if not proto.meta_graphs:
        raise TfliteConversionError(f"{pb}: the SavedModel holds no graph")
    out: dict[str, dict[str, tf.TensorSpec]] = {}
    for key, sig in proto.meta_graphs[0].signature_def.items():
        if key.startswith("__"):  # `__saved_model_init_op` and friends are not signatures
            continue
        out[key] = {
            name: tf.TensorSpec(
                None
                if info.tensor_shape.unknown_rank
                else [d.size if d.size >= 0 else None for d in info.tensor_shape.dim],
                tf.as_dtype(info.dtype),
                name=name,
            )
            for name, info in sorted(sig.inputs.items())
        }
    return out


def convert(
    saved_model_dir: Path,
    quantize: str,
    representative: Representative | None = None,
    signature_keys: list[str] | None = None,
    keep_float: Sequence[str] = (),
) -> bytes:
    """The TFLite flatbuffer of the SavedModel's signatures `signature_keys` (default: all).

    `quantize` is one of `QUANTIZE` (see the module docstring for what each stores as int8).
    `representative` is required for "int8" and ignored otherwise: a callable returning an
    iterable of samples, each the inputs by name (fed to every converted signature whose inputs
    are all among them; other names are ignored) or a (signature key, inputs) pair, for a
    signature whose inputs dev data does not have (a decoder step's cache). Calibrate on a few
    dozen batches of the spec's dev input with the batch sizes and lengths that will be served:
    activation ranges are what calibration saw. (Samples may change shape from one to the next
    for graphs that compute their shapes at run time, as seqc's do; see `_hint`.)

    `keep_float` (int8 only) names layers (spec layer paths, `frontend` or `blocks.0`) whose
    ops stay float32 while the rest is int8 (`seqc.backends.tflite.selective`).

    Raises `TfliteConversionError` for a missing SavedModel, an unknown signature key or mode,
    calibration feeds that do not fit, any op the TFLite builtins cannot express, a kept layer
    with no op in the model, and (int8) any op outside the kept layers left computing in float
    or any value of a kept layer rounded through int8 inside it.
    """
    saved_model_dir = Path(saved_model_dir)
    if quantize not in QUANTIZE:
        raise TfliteConversionError(
            f"quantize={quantize!r} is not a TFLite mode; expected one of {', '.join(QUANTIZE)}"
        )
    if quantize == "int8" and representative is None:
        raise TfliteConversionError(
            'quantize="int8" needs a representative dataset to calibrate activation ranges; '
            "pass `representative=` (batches of the spec's dev input), or use "
            'quantize="dynamic", which needs none'
        )
    if keep_float and quantize != "int8":
        raise TfliteConversionError(
            f"keep_float names layers to leave in float under quantize='int8'; with "
            f"quantize={quantize!r} the converter has no per-layer control (its dynamic range "
            "quantizes every large enough weight): drop keep_float or use quantize='int8'"
        )
    inputs = signature_inputs(saved_model_dir)
    keys = list(signature_keys) if signature_keys is not None else sorted(inputs)
    unknown = [k for k in keys if k not in inputs]
    if unknown or not keys:
        raise TfliteConversionError(
            f"{saved_model_dir}: no signature {', '.join(map(repr, unknown)) or 'given'}; "
            f"the SavedModel has {', '.join(sorted(inputs))}"
        )

    def calibration(keys: list[str]) -> Samples | None:
        if representative is None or quantize != "int8":
            return None
        return _calibration(representative, {k: inputs[k] for k in keys})

    try:
        converter = _converter(saved_model_dir, quantize, calibration(keys), keys)
        # int8 is calibrated here and quantized below, so that some ops can be left float
        converter._experimental_calibrate_only = quantize == "int8"
        with warnings.catch_warnings():
            # Calibrating alone runs TF's own calibrator, which still builds the deprecated
            # tf.lite.Interpreter and says so; nothing here runs models with it.
            warnings.filterwarnings("ignore", message=r"\s*Warning: tf.lite.Interpreter")
            model = converter.convert()
    except TfliteConversionError:
        raise
    except Exception as e:
        raise _explain(e, saved_model_dir, quantize, calibration, keys) from e
    if quantize == "int8":
        kept = _kept_nodes(model, keep_float, saved_model_dir) if keep_float else []
        model = quantize_except(model, [*kept, *signal_nodes(model), *shape_nodes(model)])
    if quantize in ("dynamic", "int8"):
        model = share_tied_tables(model)
    if quantize == "int8":
        _check_integer(model, saved_model_dir, keep_float)
        _check_islands(model, saved_model_dir, keep_float)
    return model


def _check_islands(model: bytes, saved_model_dir: Path, keep_float: Sequence[str]) -> None:
    """Refuse an int8 model in which a `keep_float` layer's values went through int8 inside
    the layer (`seqc.backends.tflite.islands`): it would not compute them as asked."""
    from seqc.backends.tflite.islands import leaks

    found = leaks(model, keep_float)
    if found:
        raise TfliteConversionError(
            f"{saved_model_dir}: keep_float = [{', '.join(map(repr, keep_float))}], but "
            f"{len(found)} value(s) of those layers went through int8: {'; '.join(found[:6])}. "
            "This is a defect of seqc's TF graph or of the converter (please report it); until "
            "it is mended, keep the layers around it float too, or use quantize='dynamic'",
            ops=tuple(found),
        )


def _kept_nodes(model: bytes, keep_float: Sequence[str], saved_model_dir: Path) -> list[str]:
    found = layer_nodes(model, list(keep_float))
    missing = [layer for layer, nodes in found.items() if not nodes]
    if missing:
        raise TfliteConversionError(
            f"{saved_model_dir}: keep_float names {', '.join(map(repr, missing))}, but no op of "
            "the converted model computes that layer; name layers of the model (spec layer "
            "paths such as `frontend` or `blocks.0`)"
        )
    return [name for nodes in found.values() for name in nodes]


def _converter(
    saved_model_dir: Path,
    quantize: str,
    samples: Samples | None,
    keys: list[str],
) -> tf.lite.TFLiteConverter:
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model_dir), signature_keys=keys)
    # Builtins only (the default, said here because it is a decision): see the module docstring.
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    # Lower TensorArray/TensorList ops (recurrent scans) to builtin tensor ops rather than
    # keeping them as Flex ops; the default, and the only form `ai_edge_litert` can run.
    converter._experimental_lower_tensor_list_ops = True
    if quantize == "none":
        return converter
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "fp16":
        converter.target_spec.supported_types = [tf.float16]
    elif quantize == "int8":
        converter.representative_dataset = samples
        # Asks for int8 kernels only; not enforced by the converter, hence `_check_integer`.
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        # A float32 interface: the model quantizes its float inputs and dequantizes its float
        # outputs itself (int32 ids and bool masks pass through untouched).
        converter.inference_input_type = tf.float32
        converter.inference_output_type = tf.float32
    return converter


def _check_integer(model: bytes, saved_model_dir: Path, keep_float: Sequence[str] = ()) -> None:
    """Refuse an "int8" model in which an op outside the `keep_float` layers still computes on
    values in float (see `flatbuffer`; float arithmetic on lengths, such as rotary angles, has
    no range to calibrate and is allowed)."""
    left = [
        op
        for op in float_compute(model, values_only=True)
        if not any(in_layers(name, list(keep_float)) for name in op.output_names)
        and not all(in_signal(name) for name in op.output_names)
    ]
    if left:
        shown = sorted({f"{op.name} in {op.subgraph} ({_first(op)})" for op in left})
        raise TfliteConversionError(
            f"{saved_model_dir}: quantize='int8' left {len(left)} op(s) computing in float, "
            f"having no int8 kernel: {', '.join(shown[:8])}. Keep their layers in float "
            "(keep_float = [...], named in each op's name before its first /), use "
            "quantize='dynamic' (float activations, int8 weights), or express the op otherwise "
            "in seqc.backends.tf.ops",
            ops=tuple(sorted({op.name for op in left})),
        )


def _first(op: Op) -> str:
    return (op.output_names[0].split(";")[0] if op.output_names else "") or "unnamed"


def _calibration(
    representative: Representative, inputs: dict[str, dict[str, tf.TensorSpec]]
) -> Samples:
    """The converter's `representative_dataset`: always (signature key, feeds), the form the
    calibrator needs once a model has more than one signature; feeds cast to the input dtypes.
    A (key, feeds) sample for a signature not converted is skipped: one representative can
    serve an encoder and a decoder step converted apart (a misspelt key starves its signature,
    which is an error below)."""

    def fit(key: str, feeds: Feeds) -> Feeds:
        out = {}
        for name, spec in inputs[key].items():
            x = np.asarray(feeds[name])
            rank = spec.shape.rank
            if rank is not None and x.ndim != rank:
                raise TfliteConversionError(
                    f"representative input `{name}` of signature {key!r} has shape {x.shape}; "
                    f"the signature expects {spec.shape} ({spec.dtype.name})",
                    signature=key,
                )
            out[name] = x.astype(spec.dtype.as_numpy_dtype, copy=False)
        return out

    def samples() -> Iterator[tuple[str, Feeds]]:
        counts = dict.fromkeys(inputs, 0)
        for sample in representative():
            if isinstance(sample, tuple):
                key, feeds = sample
                if key not in inputs:
                    continue
                missing = set(inputs[key]) - set(feeds)
                if missing:
                    raise TfliteConversionError(
                        f"representative sample for signature {key!r} lacks "
                        f"{', '.join(sorted(missing))}",
                        signature=key,
                    )
                counts[key] += 1
                yield key, fit(key, feeds)
                continue
            for key, specs in inputs.items():
                # By name and rank: `x` of an encoder and `x` of a step may differ in rank.
                if all(n in sample and _rank_fits(spec, sample[n]) for n, spec in specs.items()):
                    counts[key] += 1
                    yield key, fit(key, sample)
        starved = [k for k, n in counts.items() if n == 0]
        if starved:
            needs = "; ".join(
                f"{k!r} takes {', '.join(f'{n}: {s.shape}' for n, s in inputs[k].items())}"
                for k in starved
            )
            raise TfliteConversionError(
                f"the representative dataset fed no sample to {needs}. Yield dicts with "
                "those inputs, or (signature key, inputs) pairs"
            )

    return samples


def _rank_fits(spec: tf.TensorSpec, value: object) -> bool:
    return spec.shape.rank is None or np.ndim(value) == spec.shape.rank


def _explain(
    error: Exception,
    saved_model_dir: Path,
    quantize: str,
    calibration: Callable[[list[str]], Samples | None],
    keys: list[str],
) -> TfliteConversionError:
    """A few lines for a converter failure. With several signatures, each is converted alone to
    say which ones fail (the converter's locations name traced functions, not signature keys)."""
    failing = [(keys[0] if len(keys) == 1 else None, error)]
    if len(keys) > 1:
        failing = []
        for key in keys:
            try:
                samples = calibration([key])
                _converter(saved_model_dir, quantize, samples, [key]).convert()
            except Exception as e:
                failing.append((key, e))
        failing = failing or [(None, error)]
    key, first = failing[0]
    ops, reasons = _reasons(first)
    which = ", ".join(repr(k) for k, _ in failing if k) or ", ".join(map(repr, keys))
    lines = [
        f"{saved_model_dir}: TFLite conversion (quantize={quantize!r}) failed for "
        f"signature {which}",
        *(f"  {r}" for r in reasons),
    ]
    hint = _hint(ops, reasons)
    if hint:
        lines.append(hint)
    return TfliteConversionError(
        "\n".join(lines), signature=key, ops=tuple(ops), details=str(first)
    )


def _reasons(error: Exception) -> tuple[list[str], list[str]]:
    """The failing ops and one line per distinct converter diagnostic."""
    ops: list[str] = []
    reasons: list[str] = []
    for data in getattr(error, "errors", []) or []:
        op = data.operator.name
        if op == "tf.Const":  # a pass's summary, not an op; its advice (Flex) does not apply
            continue
        message = data.error_message.replace("\\n", "\n").split("\n")[0].strip()
        if op and op not in ops:
            ops.append(op)
        where = next((c.name for c in data.location.call if c.name), "")
        where = where.split("@")[0]
        line = f"{op or '?'}{f' ({where})' if where else ''}: {message}"
        if line not in reasons:
            reasons.append(line)
    if not reasons:  # not a structured converter error: keep its first lines only
        text = str(error).strip().splitlines() or [type(error).__name__]
        reasons = [f"{type(error).__name__}: {text[0]}", *text[1:3]]
    return ops, reasons[:6]


def _hint(ops: list[str], reasons: list[str]) -> str:
    text = " ".join(ops + reasons)
    if "failed to prepare" in text and "RuntimeError" in text:
        return (
            "A model failed to run in calibration. TFLite's calibrator resizes a signature's "
            "inputs one at a time, so between two samples of different shapes it can hold "
            "inputs that disagree (an op that checks shapes when prepared then fails). Graphs "
            "that compute their shapes at run time, as seqc's do, are not affected; otherwise "
            "give each signature samples of one shape."
        )
    if "TensorList" in text:
        return (
            "A recurrent scan writes a TensorArray whose element shape is not static (its batch "
            "dim is unknown): TFLite lowers tensor lists to builtin ops only for a static "
            "element shape, and `ai_edge_litert` runs neither Flex nor custom tensor-list ops. "
            "The scan (seqc.backends.tf.scan) must accumulate its outputs without a "
            "TensorArray (e.g. by concatenation) for a dynamic-batch TFLite model."
        )
    if "flex" in text.lower() or "select" in text.lower():
        return (
            "The op has no TFLite builtin kernel, and `ai_edge_litert` has no Flex delegate "
            "to run TF kernels: express it with builtin ops in seqc.backends.tf.ops."
        )
    return ""
