"""`python -m research.grouping_ablation`: the grouping ablation's runs (see research/grouping_ablation/ablation.py)."""

from research.grouping_ablation.ablation import main

main()
