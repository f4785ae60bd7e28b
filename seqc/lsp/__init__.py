"""`seqc lsp`: the language server that puts the front end in the editor.

Every feature here is a thin view of what the command line already does: diagnostics are
`seqc check` on the editor's buffers, formatting is `seqc fmt`, hover reads the same catalogue
as `seqc layers` and the same provenance as `seqc show --provenance`. The server never owns a
second copy of the language: what it cannot parse, it leaves alone.

Modules, one concept each: `server` (wiring and the error net), `documents` (open buffers, the
overlay, positions), `diagnostics` (checks to LSP diagnostics, quick fixes), `context` (what the
cursor is on, from tokens, so it works on text that does not parse), `hover`, `completion`,
`navigation` (definition and document symbols) and `formatting`.
"""
