"""A deployment artifact on disk: its files, its manifest, and the runtimes that load it.

Layout of one artifact folder (`<out>/<format>-<quantize>/`):

    manifest.json     what the artifact is and how to drive it (below)
    encoder.onnx, step.onnx        ONNX (no encoder file for a language model)
    model.tflite                   TFLite, signatures `encode` and `step`
    saved_model/                   SavedModel, forward and step signatures
    tokenizer/        the tokenizer, saved (`seqc.data.tokenizers.load_tokenizer` reads it)
    spec/             the frozen `.seq` files the model was compiled from

The manifest holds the experiment, the task kind, the special token ids, the default decode
strategy, the step function's tensors (token input, caches with symbolic shapes, encoder
inputs and outputs), quantization, the parity and quality figures measured at export, and a
sha256 of every file and of its own body, so a corrupt or edited artifact (a model file or the
manifest itself) is refused on load rather than decoding garbage or failing inside its runtime,
and an artifact paired with another spec or tokenizer says so.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqc.backends import registry
from seqc.backends.api import StepFunctions
from seqc.compiler.step_signature import StepSignature
from seqc.spec.errors import FileError

if TYPE_CHECKING:  # a session is only read here; decoding an artifact alone needs none
    from seqc.data.tokenizers import Tokenizer
    from seqc.run.session import Session

MANIFEST = "manifest.json"
ARTIFACT_VERSION = 1


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    paths = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for p in paths:
        h.update(p.relative_to(path).as_posix().encode() if path.is_dir() else b"")
        h.update(p.read_bytes())
    return h.hexdigest()


def model_bytes(folder: Path, fmt: str) -> int:
    """Bytes of the model files (weights and graphs), not the tokenizer or the spec."""
    total = 0
    for name in registry.artifact_format(fmt).model_files:
        p = folder / name
        if p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        elif p.exists():
            total += p.stat().st_size
    return total


SELF_DIGEST = "manifest_sha256"
"""The manifest's digest of its own body: the manifest says how to drive the model (its caches'
shapes, its special ids), so an edit to it is as damaging as an edit to a model file."""


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    files = {
        p.relative_to(folder).as_posix(): sha256_of(p)
        for p in sorted(folder.iterdir())
        if p.name != MANIFEST
    }
    body = {"artifact_version": ARTIFACT_VERSION, **manifest, "files": files}
    body = json.loads(json.dumps(body, default=str))  # as a reader will see it
    body[SELF_DIGEST] = _body_digest(body)
    (folder / MANIFEST).write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")


def _body_digest(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest without its own digest, in one canonical JSON form (sorted keys,
    no spacing): the same whatever indentation the file was written with."""
    body = {k: v for k, v in manifest.items() if k != SELF_DIGEST}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Artifact:
    path: Path
    manifest: dict[str, Any]

    @property
    def format(self) -> str:
        return str(self.manifest["format"])

    @property
    def signature(self) -> StepSignature:
        return StepSignature.from_json(self.manifest["step"])

    def record(self) -> dict[str, Any]:
        """What an evaluation's `scores.json` says it scored: the folder, the format, the
        quantisation and the checkpoint it was exported from."""
        return {
            "path": str(self.path),
            "format": self.format,
            "quantize": self.manifest.get("quantize"),
            "checkpoint": self.manifest.get("checkpoint"),
        }

    def tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        from seqc.data.tokenizers import load_tokenizer

        source = load_tokenizer(self.path / "tokenizer" / "source")
        target_dir = self.path / "tokenizer" / "target"
        return source, load_tokenizer(target_dir) if target_dir.is_dir() else source


def _bad(path: Path, message: str, hint: str) -> FileError:
    return FileError(message, path=str(path), code="bad-artifact", hint=hint)


def load_artifact(path: Path) -> Artifact:
    """Read and verify an artifact folder: the manifest parses, every file is there and
    unchanged (sha256)."""
    manifest_path = path / MANIFEST
    if not path.is_dir():
        raise FileError(
            f"no artifact at {path}",
            path=str(path),
            code="no-artifact",
            hint="export one: seqc export SPEC -e EXP --format onnx",
        )
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise _bad(path, f"{path} has no {MANIFEST}", "is this a seqc export folder?") from None
    except json.JSONDecodeError as e:
        raise _bad(manifest_path, f"{MANIFEST} is not valid JSON: {e}", "re-export") from None
    if not isinstance(manifest, dict):
        raise _bad(manifest_path, f"{MANIFEST} is not a JSON object", "re-export the artifact")
    # an artifact written before the manifest carried its own digest has none to check
    if SELF_DIGEST in manifest and manifest[SELF_DIGEST] != _body_digest(manifest):
        raise _bad(
            manifest_path,
            f"the artifact's {MANIFEST} was changed or is corrupt (its own sha256 differs)",
            "the manifest describes the model's inputs and caches; re-export the artifact "
            "rather than editing it",
        )
    if manifest.get("artifact_version") != ARTIFACT_VERSION:
        raise _bad(
            manifest_path,
            f"artifact version {manifest.get('artifact_version')} is not {ARTIFACT_VERSION}",
            "re-export it with this seqc",
        )
    if manifest.get("format") not in registry.FORMATS:
        raise _bad(
            manifest_path,
            f"the manifest names format {manifest.get('format')!r}, which this seqc does not run",
            f"expected one of {', '.join(registry.FORMATS)}; re-export the artifact",
        )
    for name, digest in manifest.get("files", {}).items():
        p = path / name
        if not p.exists():
            raise _bad(p, f"the artifact's file {name} is missing", "re-export the artifact")
        if sha256_of(p) != digest:
            raise _bad(
                p,
                f"the artifact's file {name} was changed or is corrupt (sha256 differs)",
                "re-export the artifact",
            )
    return Artifact(path, manifest)


def check_against(artifact: Artifact, session: Session) -> None:
    """An artifact used with a spec must come from that experiment and tokenizer."""
    m = artifact.manifest
    problems = []
    if m.get("experiment") != session.resolved.name:
        problems.append(f"it was exported from `{m.get('experiment')}`")
    elif m.get("task") not in (None, session.task):  # a multi-task model: one artifact a task
        problems.append(f"it holds task `{m.get('task')}`, not `{session.task}`")
    tok = session.pipeline.tokenizer
    if m.get("vocab_size") != tok.vocab_size:
        problems.append(
            f"its tokenizer has {m.get('vocab_size')} ids, the spec's has {tok.vocab_size}"
        )
    else:
        art_tok, _ = artifact.tokenizers()
        probe = "The quick brown fox, 1234."
        if art_tok.encode(probe) != tok.encode(probe):
            problems.append("its tokenizer splits text differently from the spec's")
    if problems:
        raise FileError(
            f"the artifact at {artifact.path} does not match experiment "
            f"`{session.resolved.name}`: " + "; ".join(problems),
            path=str(artifact.path),
            code="artifact-mismatch",
            hint="decode with the artifact alone (seqc decode --artifact DIR), or export again",
        )


def step_functions(artifact: Artifact) -> StepFunctions:
    """The artifact loaded in its format's runtime (onnxruntime, LiteRT, TF). A model file that
    passed its sha256 check but does not load (cut short, then re-hashed) is the runtime's
    `FileError` naming the file (`bad-model`), never the runtime's own exception."""
    return registry.artifact_format(artifact.format).runtime(artifact.path, artifact.signature)
