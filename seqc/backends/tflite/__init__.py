"""The TFLite (LiteRT) backend: `convert.py` turns the TF backend's SavedModel into a TFLite
flatbuffer (float32, dynamic-range, float16 or full int8); `runtime.py` runs it by signature with
the `ai_edge_litert` interpreter. Training and interpretation stay with the TF backend."""
