"""The JAX backend: interprets the op graph inside `jax.jit`; trains with optax, checkpoints
with orbax. `ops.py` is the primitive table over `context.py`'s `Ctx`; the other backends mirror
its names."""
