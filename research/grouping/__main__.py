"""`python -m research.grouping`: the grouping ablation (see research/grouping/grouping.py)."""

from research.grouping.grouping import main

main()
