"""`python -m research.code_tester`: the code tester's reward rules in training."""

from research.code_tester.code_tester import main

main()
