"""The training loop and what it steps with, one concept per module.

`loop` (the run: start or resume, step, log, evaluate, checkpoint, stop), `stepper` (one task's
steps, or a multi-task model's in their mix: `mix`), `schedule` (the learning rate on the host),
`patience` (early stopping), `interrupt` (SIGINT/SIGTERM: stop after the step with a checkpoint),
`warm_start` (params from another run's checkpoint), `candidates` (a sampled loss's proposal),
`checks` (what a run refuses before it writes anything), `layout` (a placement or a mesh),
`dev` (BLEU, WER beside the loss), `record` (what `run.json` says), `failures` (the errors a run
stops with, each saying what is intact).

Imports flow one way: `loop` imports the others; none imports `loop`.
"""
