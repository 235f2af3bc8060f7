"""`python -m research.verl_cpu`: AT-GRPO through verl's stack on CPU beside the local engine."""

from research.verl_cpu.verl_cpu import main

main()
