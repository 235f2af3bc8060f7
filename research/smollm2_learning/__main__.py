"""`python -m research.smollm2_learning`: AT-GRPO on the real model (see research/smollm2_learning/learning.py)."""

from research.smollm2_learning.learning import main

main()
