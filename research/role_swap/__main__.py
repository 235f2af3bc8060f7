"""`python -m research.role_swap`: the role-swap probe (see research/role_swap/role_swap.py)."""

from research.role_swap.role_swap import main

main()
