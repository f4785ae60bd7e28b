"""The ONNX backend: an op graph as an ONNX model, for onnxruntime and other ONNX runtimes.

- `emit.to_onnx(graph, params)` builds the model (inference only, float32) and `emit.check`
  gates it (the ONNX checker and strict shape inference, failures named by seqc layer path);
- `ops` is the per-primitive table, the mirror of `backends/jax/ops.py` and `backends/tf/ops.py`,
  over `context.Ctx` (the graph under construction); `errors.OnnxExportError` is what all raise;
- `runtime.OnnxRunner` runs a model in onnxruntime, `runtime.reference_run` in `onnx.reference`;
- `quantize.quantize_dynamic` / `quantize_static` write int8 models.
"""
