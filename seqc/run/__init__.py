"""Running experiments: the session, the training loop, the run directory, evaluation, decoding
and export.

Backend-neutral: everything here drives a backend through the contract of `seqc.backends.api`,
found by name in `seqc.backends.registry`; no module here imports a backend package."""
