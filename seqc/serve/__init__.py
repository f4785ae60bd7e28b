"""`seqc serve`: exported artifacts behind an HTTP server.

The Open Inference Protocol (KServe v2 / Triton REST) and task routes for people with curl, over
Starlette on uvicorn, with dynamic batching (`batcher`), back-pressure, Prometheus metrics and a
page to try a model. Layering: this stage runs artifacts through `seqc.run` (their decoders,
their tokenizers) and reaches backends only through the registry, as `seqc.run` does; the
command line (`seqc.cli.serve`) starts it.
"""
