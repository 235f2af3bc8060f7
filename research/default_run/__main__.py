"""`python -m research.default_run`: record, check or show the default run (see research/default_run/default_run.py)."""

from research.default_run.default_run import main

main()
