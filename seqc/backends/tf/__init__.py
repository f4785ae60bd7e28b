"""The TensorFlow backend: interprets the op graph inside `tf.function`. `ops.py` is the primitive
table, named as in `seqc.backends.jax.ops`, over `context.py`'s `Ctx`; params are the same dict of
arrays by layer path."""
