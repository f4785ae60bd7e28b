"""Pipeline parallelism's compile-time half: the model's graph cut into stages.

A pipelined step (GPipe: Huang et al., 2019, from Lingvo) runs contiguous groups of the model's
layers on the devices of a `stage` mesh axis and streams micro-batches through them. What is
decided before any backend runs is here, so `seqc place --pipeline`, `seqc show --sharding`,
`seqc check` and the JAX step read the same plan:

- `units`: the graph's ops in runs by top-level layer (`embed`, `blocks.3`, `norm`): the places a
  stage may begin, each with its cost (`seqc.compiler.cost`) and memory.
- `partition`: the optimal contiguous split of those units into S stages (the slowest stage as
  fast as it can be, every stage within its device's memory), or a manual one.
- `stages`: the graph split at those boundaries into one graph per stage, with the values each
  hands the next (`carry`), so a backend runs each stage with the one interpreter and nothing of
  the lowering is written again.
- `plan`: the spec's `distribution.pipeline` and `distribution.stages` made into a checked
  `PipelinePlan`.
"""
