"""`python -m research.smollm2_regime`: the real model's warm-start regimes (see research/smollm2_regime/regime.py)."""

from research.smollm2_regime.regime import main

main()
