"""User layers and models: checking their declarations and instantiating them.

`check.py` checks each declaration on its own (`check_layers`), with the static types of its
expressions in `infer.py`, its forward body in `forward.py` and how layers contain each other in
`nesting.py`; `binding.py` reads a user layer as a kind and binds a call of it; `instance.py`
builds a model's tree of `LayerInstance`s for concrete values.
"""
