"""`python -m research.sokoban_sudoku`: the Sokoban turn-0 plan reply diagnostic."""

from research.sokoban_sudoku.replies import main

main()
