"""The built-in catalogue: every kind a .seq spec may call, declared in Python.

Importing this package fills `seqc.spec.kinds.REGISTRY`. Each module declares one group of
namespaces; a namespace says where in a spec a call is valid, so `adam(...)` is accepted only
where an optimizer is expected:

- layers: "layer", the layers a model body calls (Embedding, SelfAttention, Softmax, ...);
  speech: the audio front end and the Conformer, in the same namespace.
- training: "optimizer", "schedule", "loss", "metric", "decode".
- data: "reader" (text, tsv, jsonl files) and "tokenizer".
- distribution: "device", "placement" (single, manual, Baechi's m_topo/m_etf/m_sct) and
  "export" (serving formats).
- blocks: "block", the fields of each block (input, task, train, distribution, export,
  experiment), declared as kinds so blocks and calls share one checker.

Why Python and not a .seq prelude: the catalogue is what the backends implement, so it lives
next to them and is versioned with them; user layers declared in .seq use the same types.

Conventions: defaults are plain values the .seq language can write (int, float, bool, str,
none, list, map). A default that is itself a kind is the string naming it (e.g. a train block's
optimizer defaults to "adam"), meaning that kind called with all its defaults. `positional` on
each kind lists the params that may be given without a name, in order.
"""

from __future__ import annotations

from seqc.spec.catalogue import blocks, data, distribution, layers, speech, training

__all__ = ["blocks", "data", "distribution", "layers", "speech", "training"]
