"""A run directory and the files a run writes: its layout and records (`directory`), the lock
of the run that owns it (`lock`), the checks before a resume (`resume`) or a use of its weights
(`identity`), and output files written whole or not at all (`outputs`)."""
