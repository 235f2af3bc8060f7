"""`python -m research.smollm2_math`: the study's command line (see its README.md)."""

from research.smollm2_math.study import main

main()
