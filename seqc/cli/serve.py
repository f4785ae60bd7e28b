"""`seqc serve`: exported artifacts behind an HTTP server (`seqc.serve`), on uvicorn.

Every model is loaded (and its files checked against the manifest) before the server starts,
so a missing or corrupt artifact is the usual located error and exit 2, not a server that comes
up without it; the server reports ready (`GET /v2/health/ready`) once each has answered one
warm-up request. SIGTERM or Ctrl-C: uvicorn stops accepting connections, the requests in flight
are answered, and the command exits 0.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Annotated

import typer

from seqc.cli.console import err
from seqc.cli.guard import guarded
from seqc.cli.lm_options import LengthBonusOpt, LmWeightOpt
from seqc.cli.options import OptionalExpOpt, RunDirOpt
from seqc.serve import config as defaults
from seqc.spec.errors import FileError, UsageError

API_KEY_ENV = "SEQC_API_KEY"
"""The environment variable that holds the API key, when --api-key-file is not given."""


@guarded
def serve_cmd(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Artifact folders (seqc export's output), or a .seq file with -e to serve "
            "that run's exports.",
            show_default=False,
        ),
    ],
    experiment: OptionalExpOpt = None,
    run_dir: RunDirOpt = None,
    name: Annotated[
        list[str] | None,
        typer.Option(
            "--name",
            help="A model's name, in the order of the folders (default: the folder's name).",
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    max_batch_size: Annotated[
        int, typer.Option(help="Sources decoded together at most (1: no batching).", min=1)
    ] = defaults.DEFAULT_MAX_BATCH_SIZE,
    max_delay_ms: Annotated[
        float,
        typer.Option(help="How long a batch waits for more sources after its first.", min=0),
    ] = defaults.DEFAULT_MAX_DELAY_MS,
    max_queue: Annotated[
        int, typer.Option(help="Sources waiting per model; past it, 503.", min=1)
    ] = defaults.DEFAULT_MAX_QUEUE,
    timeout_s: Annotated[
        float, typer.Option(help="A request unanswered after this gets 504.", min=0.001)
    ] = defaults.DEFAULT_TIMEOUT_S,
    threads: Annotated[int, typer.Option(help="Batches one model runs at once.", min=1)] = 1,
    max_body_bytes: Annotated[
        int, typer.Option(help="Largest request body; past it, 413.", min=1)
    ] = defaults.DEFAULT_MAX_BODY_BYTES,
    max_text_chars: Annotated[
        int, typer.Option(help="Longest sentence or prompt, in characters.", min=1)
    ] = defaults.DEFAULT_MAX_TEXT_CHARS,
    max_decode_length: Annotated[
        int, typer.Option(help="Most tokens a request may ask to decode.", min=1)
    ] = defaults.DEFAULT_MAX_DECODE_LENGTH,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            help=f"A file holding the API key every route but the health checks needs "
            f"(Authorization: Bearer KEY); or set {API_KEY_ENV}."
        ),
    ] = None,
    cors: Annotated[
        list[str] | None,
        typer.Option("--cors", help="An origin browsers may call from (repeatable)."),
    ] = None,
    lm: Annotated[
        Path | None,
        typer.Option(
            "--lm",
            help="An exported word LM to fuse into every speech model's beam search (as "
            "seqc decode --artifact DIR --lm LM does).",
            show_default=False,
        ),
    ] = None,
    lm_weight: LmWeightOpt = 0.3,
    length_bonus: LengthBonusOpt = 1.0,
) -> None:
    """Serve exported models over HTTP: the Open Inference Protocol (/v2), task routes for curl
    (/v1/models/NAME/translate, /generate, /transcribe, /score), /metrics, and a page at /."""
    from seqc.serve.config import ServeConfig

    folders = _folders(paths, experiment, run_dir)
    names = list(name or [])
    if len(names) > len(folders):
        raise UsageError(
            f"{len(names)} --name for {len(folders)} model(s)",
            code="bad-option",
            hint="give at most one --name per artifact folder, in the same order",
        )
    config = ServeConfig(
        max_batch_size=max_batch_size,
        max_delay_ms=max_delay_ms,
        max_queue=max_queue,
        timeout_s=timeout_s,
        threads=threads,
        max_body_bytes=max_body_bytes,
        max_text_chars=max_text_chars,
        max_decode_length=max_decode_length,
        api_key=_api_key(api_key_file),
        cors_origins=tuple(cors or ()),
    )
    _run(folders, names, config, host, port, (lm, lm_weight, length_bonus))


def _folders(paths: list[Path], experiment: str | None, run_dir: Path | None) -> list[Path]:
    """The artifact folders to serve: those given, or a run's `export/*` for a spec and -e."""
    if len(paths) == 1 and paths[0].suffix == ".seq":
        if experiment is None:
            raise UsageError(
                "to serve a run's exports, name its experiment: seqc serve FILE -e EXP",
                code="missing-option",
            )
        export = (run_dir or Path("runs") / experiment) / "export"
        found = sorted(p for p in export.glob("*") if (p / "manifest.json").is_file())
        if not found:
            raise FileError(
                f"no exported artifact under {export}",
                path=str(export),
                code="no-artifact",
                hint=f"export one first: seqc export {paths[0]} -e {experiment}",
            )
        return found
    if experiment is not None:
        raise UsageError(
            "-e names an experiment of a .seq file; artifact folders need none",
            code="bad-option",
            hint="seqc serve DIR [DIR ...], or seqc serve FILE.seq -e EXP",
        )
    return paths


def _api_key(path: Path | None) -> str | None:
    if path is None:
        return os.environ.get(API_KEY_ENV) or None
    try:
        key = path.read_text().strip()
    except OSError as e:
        raise FileError(
            f"cannot read the API key file: {e.strerror}", path=str(path), code="no-file"
        ) from None
    if not key:
        raise FileError("the API key file is empty", path=str(path), code="empty-key")
    return key


def _run(
    folders: list[Path],
    names: list[str],
    config: object,
    host: str,
    port: int,
    fusion: tuple[Path | None, float, float] = (None, 0.0, 0.0),
) -> None:
    import python_multipart  # noqa: F401  (Starlette's forms need it; missing: the extra to install)
    import uvicorn

    from seqc.serve.app import build_app
    from seqc.serve.models import load_model
    from seqc.serve.server import Server

    models = {}
    for i, folder in enumerate(folders):
        model = load_model(folder, names[i] if i < len(names) else None)
        if model.name in models:
            raise UsageError(
                f"two models are named `{model.name}`",
                code="bad-option",
                hint="name them apart: --name NAME for each folder, in order",
            )
        models[model.name] = model
        err.print(f"loaded {model.name}: {model.kind} ({', '.join(model.actions)}) from {folder}")
    fuse_lm(models, *fusion)
    server = Server(models, config)  # type: ignore[arg-type]
    err.print(f"serving on http://{host}:{port} (ready once every model has warmed up)")
    # uvicorn drains on SIGTERM, then raises the signal again under the handler it found: a
    # handler that does nothing lets the command end normally, exit 0, once drained
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.run(build_app(server), host=host, port=port, log_level="info", access_log=False)
    err.print("stopped: every request in flight was answered")


def fuse_lm(models: dict, lm: Path | None, weight: float, bonus: float) -> None:
    """`--lm`: the LM fused into every speech model served; refused when none is one."""
    if lm is None:
        return
    speech = [m for m in models.values() if m.kind == "asr"]
    if not speech:
        raise UsageError(
            f"--lm {lm} fuses a word LM into speech models' beam search, and none of the "
            f"models served transcribes speech ({', '.join(models)})",
            code="not-speech",
            hint="serve a speech recogniser's artifact with it, or drop --lm",
        )
    for model in speech:
        model.fuse(lm, weight, bonus)
        err.print(f"{model.name}: fusing {lm} (lm_weight = {weight:g}, length_bonus = {bonus:g})")


COMMANDS = {"serve": serve_cmd}
"""This module's commands by name (`seqc.cli.app.LAZY_COMMANDS`)."""
