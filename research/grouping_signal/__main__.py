"""`python -m research.grouping_signal`: the gradient signal measurement (see research/grouping_signal/measure.py)."""

from research.grouping_signal.measure import main

main()
