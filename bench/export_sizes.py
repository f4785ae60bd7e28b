"""Export sizes: the files `seqc export` writes, by format and quantization, against fp32.

Why: an int8 artifact is worth shipping for its size, so the size the export table reports must
be the file a user copies, and its ratio to fp32 must come from the weights, not from what the
file carries besides (fixed tables, metadata). This runs the real export path
(`seqc.run.export.build.export_one`: build, gates, stamp, manifest) on two example models with tied
embeddings and sinusoidal positions, with their seeded initial weights (sizes do not depend on
the values; the data and tokenizers are the cached ones `seqc data prepare` built):

- `lm`: `lm.shakespeare.quick` (2 layers, d 128, vocab 2000);
- `mt`: `mt.bible.transformer.cpu` (2 + 2 layers, d 128, vocab 4000).

For each ONNX file it also splits the bytes into layer weights, `const/` tables and metadata.
The last lines are `name: value` pairs (`onnx_dynamic_ratio_lm: 0.27`). Run
`python bench/export_sizes.py [--models lm,mt] [--formats onnx,tflite]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

MODELS = {
    "lm": (ROOT / "examples" / "lm" / "shakespeare.seq", "lm.shakespeare.quick"),
    "mt": (ROOT / "examples" / "mt" / "bible_transformer.seq", "mt.bible.transformer.cpu"),
}
QUANTIZE = {"onnx": ("none", "dynamic", "int8"), "tflite": ("none", "dynamic", "int8")}


def context(spec: Path, experiment: str, cache_dir: Path | None) -> Any:
    """What `seqc export` prepares, with the seeded initial weights as a JAX checkpoint."""
    from seqc.backends.api import Weights
    from seqc.compiler.init import init_params
    from seqc.run.export.context import prepare
    from seqc.run.session import open_session

    session = open_session(spec, experiment, [], cache_dir=cache_dir)
    params = {k: np.asarray(v) for k, v in init_params(session.graph, 1).items()}
    weights = Weights("jax", 0, params, Path("init"), False)
    return prepare(session, params, weights, parity_batches=1)


def onnx_breakdown(path: Path) -> dict[str, int]:
    """Bytes of one ONNX file by what they hold."""
    import onnx

    model = onnx.load(str(path))
    tables = sum(len(t.raw_data) for t in model.graph.initializer if t.name.startswith("const/"))
    weights = sum(
        len(t.raw_data) for t in model.graph.initializer if not t.name.startswith("const/")
    )
    meta = sum(len(p.key) + len(p.value) for p in model.metadata_props)
    return {"weights": weights, "const_tables": tables, "metadata": meta}


def measure(ctx: Any, fmt: str, quantize: str, folder: Path) -> tuple[Any, str]:
    """Export one artifact; its row and, for ONNX, what its bytes hold."""
    from seqc.run.export.build import export_one

    row = export_one(ctx, fmt, quantize, folder)
    files = [p for p in row.path.rglob("*") if p.suffix in (".onnx", ".tflite")]
    on_disk = sum(p.stat().st_size for p in files)
    assert on_disk == row.size_bytes, f"reported {row.size_bytes} bytes, on disk {on_disk}"
    if fmt != "onnx":
        return row, ""
    parts = [onnx_breakdown(p) for p in sorted(files)]
    return row, "  " + ", ".join(
        f"{k} {sum(p[k] for p in parts) / 2**10:.0f} KiB" for k in parts[0]
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lm,mt", help="Comma-separated: lm, mt.")
    ap.add_argument("--formats", default="onnx,tflite", help="Comma-separated: onnx, tflite.")
    ap.add_argument("--cache-dir", type=Path, default=None)
    args = ap.parse_args(argv)

    figures: dict[str, float] = {}
    for model in args.models.split(","):
        spec, experiment = MODELS[model]
        ctx = context(spec, experiment, args.cache_dir)
        print(f"{model}: {experiment}, {sum(p.size for p in ctx.params.values()):,} params")
        with tempfile.TemporaryDirectory() as tmp:
            for fmt in args.formats.split(","):
                fp32 = 0
                for quantize in QUANTIZE[fmt]:
                    row, detail = measure(ctx, fmt, quantize, Path(tmp) / f"{fmt}-{quantize}")
                    fp32 = fp32 or row.size_bytes
                    ratio = row.size_bytes / fp32
                    print(
                        f"  {fmt:7}{quantize:8}{row.size_bytes / 2**20:7.2f} MiB  "
                        f"{ratio:5.3f}x  parity {row.parity:.1e}{detail}"
                    )
                    figures[f"{fmt}_{quantize}_mib_{model}"] = row.size_bytes / 2**20
                    if quantize == "none":
                        figures[f"{fmt}_fp32_parity_{model}"] = row.parity
                    else:
                        figures[f"{fmt}_{quantize}_ratio_{model}"] = ratio
    for name, value in figures.items():
        print(f"{name}: {value:.4g}")


if __name__ == "__main__":
    main()
