"""`python -m research.learning`: the learning table (see research/learning/learning.py)."""

from research.learning.learning import main

main()
