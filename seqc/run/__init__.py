"""Running experiments: the run directory, the training loop, evaluation and decoding.

Backend-neutral: a loop drives a backend's model object (`seqc.backends.jax.train.JaxModel`)."""
