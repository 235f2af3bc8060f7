"""`python -m research.verl_learning`: learning through verl's CPU stack, per router."""

from research.verl_learning.verl_learning import main

main()
