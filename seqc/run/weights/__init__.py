"""A run's weights as files: `restore` (a run's or a checkpoint's weights for eval, decode and
export, with the newest readable one taken), `average` (`seqc average`: the mean of the last
checkpoints) and `convert` (`seqc convert`: a checkpoint from one backend's format to the
other's).
"""
