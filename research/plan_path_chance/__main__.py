"""`python -m research.plan_path_chance`: the study's command line (see its README.md)."""

from research.plan_path_chance.chance import main

main()
