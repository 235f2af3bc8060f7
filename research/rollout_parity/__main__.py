"""`python -m research.rollout_parity`: both engines' rollouts of one fixed policy."""

from research.rollout_parity.rollout_parity import main

main()
