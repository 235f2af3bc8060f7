"""The Sokoban and Sudoku study, and the diagnostic of Sokoban's turn-0 plan replies."""
