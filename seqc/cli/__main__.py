"""`python -m seqc.cli ...`: the `seqc` command (what `seqc launch` starts in each process)."""

from seqc.cli.app import main

main()
