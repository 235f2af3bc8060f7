"""The built-in environments (import name `verl_mas_envs`), one folder per family; they implement `verl_mas.env`.

- `puzzles/`: Plan-Path, Sokoban and Sudoku, played by a tool agent and a plan agent in turn;
- `math/`: a reasoner and a tool agent answering one problem in parallel, with the final-answer grader;
- `code/`: a coder and a tester in parallel, with the sandboxed judge;
- `common`: what every family shares (invalid-output reward, read limits, board draw by split, the sandboxed tool
  program, option checks); `problem_team`: the parallel one-problem team that math and code share.

Each environment is registered by name through the `verl_mas.envs` entry-point group (pyproject.toml), the same
group through which any other package adds its own; `verl_mas.env` is the API and the registry they plug into.
"""
