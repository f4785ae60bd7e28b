"""Several processes as one run: `cluster` (which process this is, its peers, from the flags or
the environment) and `launch` (`seqc launch`: start a group on this machine, watch it, stop it
whole when one member fails).
"""
