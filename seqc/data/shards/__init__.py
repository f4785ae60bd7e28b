"""A corpus tokenised once into arrays on disk, and the batches streamed from them.

`digest` names input files by their content (memoised by stat), `layout` is the on-disk
format of one encoded split and its checks, `encode` writes it with worker processes, `plans`
turns its length index into each epoch's batches, and `loader` streams the batches with Grain.
"""
