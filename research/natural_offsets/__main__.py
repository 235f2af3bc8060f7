"""`python -m research.natural_offsets`: the coarser groupings' offset shares on ordinary AT-GRPO runs."""

from research.natural_offsets.offsets import main

main()
