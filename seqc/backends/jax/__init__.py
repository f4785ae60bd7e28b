"""The JAX backend: interprets the op graph inside `jax.jit`; trains with optax, checkpoints
with orbax. `ops.py` is the primitive table; the other backends mirror its names."""
