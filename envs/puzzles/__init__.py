"""Puzzles played by a tool agent and a plan agent (`toolplan`): Plan-Path and Sokoban on a grid board (`grid`), and
Sudoku (`sudoku`, its board in `sudoku_grid`)."""
