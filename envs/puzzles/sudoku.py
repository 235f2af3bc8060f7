"""Sudoku (4x4, 9x9, unique solutions) for a tool agent that proposes a grid and a plan agent that commits one.

Turns follow the tool/plan protocol (`toolplan`); the answer is a filled grid (format and parser in
`sudoku_grid`). The tool agent proposes a grid, typed (`tool_mode="compact"`) or printed by its
program (`tool_mode="code"`, the puzzle on stdin); the environment checks it against the rules and shows the report
to the plan agent, whose grid replaces the board. The episode ends when the board is solved or after `max_turns`
plan moves.

Rewards. progress(g) = share of the puzzle's empty cells where grid g holds the solution's digit (1.0 exactly when
g is solved); violation(g) = 1 if g repeats a digit in a row, column or box or changes a given cell, else 0; a bad
grid is unparsable text, a wrong size or a digit out of range.

| role | outcome                                         | valid | team reward     | local reward                      |
|------|-------------------------------------------------|-------|-----------------|-----------------------------------|
| tool | grid g read (typed, or printed by the program)  | yes   | progress(board) | progress(g) - 0.25 * violation(g) |
| tool | no code block, program failed, or bad grid      | no    | progress(board) | -0.5                              |
| plan | grid g committed: board := g                    | yes   | progress(g)     | progress(g) - 0.25 * violation(g) |
| plan | bad grid or a given changed: board unchanged    | no    | progress(board) | -0.5                              |

The tool's move never changes the shared board, so its team reward is the board's current progress.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from verl_mas.env import register_env
from verl_mas_envs.common import READ_LIMIT_NOTE, Unreadable, config_of

from .sudoku_grid import (
    SIZES,
    Board,
    GridCheck,
    SudokuBoard,
    box_size,
    check_grid,
    generate_board,
    parse_grid,
    render_grid,
    stdin_text,
)
from .toolplan import EpisodeState, Move, ToolPlanConfig, ToolPlanEnv

DEFAULT_CLUES = {4: 6, 9: 30}
VIOLATION_PENALTY = 0.25

EXPERT_PROGRAM = """\
import sys

grid = [[int(v) for v in line.split()] for line in sys.stdin.read().splitlines() if line.strip()]
n = len(grid)
b = int(round(n ** 0.5))
cells = [(r, c) for r in range(n) for c in range(n) if grid[r][c] == 0]


def candidates(r, c):
    used = set(grid[r]) | {grid[i][c] for i in range(n)}
    top, left = r - r % b, c - c % b
    used |= {grid[i][j] for i in range(top, top + b) for j in range(left, left + b)}
    return [v for v in range(1, n + 1) if v not in used]


def solve():
    open_cells = [(r, c) for r, c in cells if grid[r][c] == 0]
    if not open_cells:
        return True
    r, c = min(open_cells, key=lambda cell: len(candidates(*cell)))
    for v in candidates(r, c):
        grid[r][c] = v
        if solve():
            return True
    grid[r][c] = 0
    return False


solve()
print("\\n".join(" ".join(map(str, row)) for row in grid))
"""


@dataclass(frozen=True)
class SudokuConfig(ToolPlanConfig):
    """The protocol's options and the board's; a task's options override them at reset."""

    size: int = 4
    clues: int | None = None  # target number of given cells (default per size); more remain if uniqueness needs

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.size, int) and self.size in SIZES):  # 4.0 == 4, but a float sizes no grid
            raise ValueError(f"sudoku size must be one of {SIZES}, got {self.size!r}")
        if self.clues is not None and not (isinstance(self.clues, int) and 0 <= self.clues < self.size**2):
            raise ValueError(f"sudoku clues must be an int in [0, {self.size**2}), got {self.clues!r}")

    @property
    def target_clues(self) -> int:
        return DEFAULT_CLUES[self.size] if self.clues is None else self.clues


@dataclass(frozen=True)
class ToolProposal:
    """The tool agent's latest result as the plan agent sees it."""

    turn: int
    grid: Board | None
    report: str


@dataclass(frozen=True, kw_only=True)
class SudokuState(EpisodeState):
    """The board's current grid and the tool agent's latest proposal."""

    grid: Board
    proposal: ToolProposal | None = None


@register_env("sudoku")
class SudokuEnv(ToolPlanEnv[SudokuConfig, SudokuBoard, SudokuState, Board]):
    """A Sudoku board shared by a tool agent (proposes) and a plan agent (commits); its options are `SudokuConfig`'s."""

    expert_program = EXPERT_PROGRAM
    answer_noun = "grid"
    puzzle_noun = "Sudoku"

    def __init__(self, **options: Any) -> None:
        super().__init__(config_of(SudokuConfig, options))

    # --- ToolPlanEnv --------------------------------------------------------------------------------------------

    def generate_board(self, seed: int, split: str) -> SudokuBoard:
        return generate_board(self.config.size, self.config.target_clues, seed, split)

    def start(self, board: SudokuBoard) -> SudokuState:
        if board.puzzle == board.solution:
            raise ValueError("sudoku: the puzzle is already solved")
        return SudokuState(grid=board.puzzle)

    def read_answer(self, text: str) -> Board | Unreadable:
        parsed = parse_grid(text, self.board.size)
        return Unreadable(parsed.error) if parsed.grid is None else parsed.grid

    def program_input(self) -> str:
        return stdin_text(self.board.puzzle)

    def expert_answer(self) -> str:
        return f"<answer>\n{stdin_text(self.board.solution)}</answer>"

    def propose(self, answer: Board | Unreadable) -> tuple[SudokuState, Move]:
        state = self.state
        if isinstance(answer, Unreadable):
            proposal = ToolProposal(state.turn, None, f"no usable grid: {answer.reason}")
            return replace(state, proposal=proposal), Move.rejected(answer.reason)
        check = self.check(answer)
        local = self.progress(answer) - VIOLATION_PENALTY * check.violation
        proposal = ToolProposal(state.turn, answer, check.report())
        return replace(state, proposal=proposal), Move(local, True, {"check": check.report()})

    def commit(self, answer: Board | Unreadable) -> tuple[SudokuState, Move]:
        state = self.state
        if isinstance(answer, Unreadable):
            return state, Move.rejected(answer.reason)
        check = self.check(answer)
        if check.changed_givens:
            cells = ", ".join(f"row {r + 1} col {c + 1}" for r, c in check.changed_givens)
            return state, Move.rejected(f"changes given cells {cells}")
        local = self.progress(answer) - VIOLATION_PENALTY * check.violation
        outcome = "solved" if answer == self.board.solution else "playing"
        return replace(state, grid=answer), Move(local, True, {"check": check.report()}, outcome)

    def team_reward(self) -> float:
        return self.progress(self.state.grid)

    # --- scoring ------------------------------------------------------------------------------------------------

    def progress(self, grid: Board) -> float:
        """Share of the puzzle's empty cells that hold the solution's digit (1.0 exactly when solved)."""
        size, givens, solution = self.board.size, self.board.givens, self.board.solution
        empty = [(r, c) for r in range(size) for c in range(size) if (r, c) not in givens]
        return sum(grid[r][c] == solution[r][c] for r, c in empty) / len(empty)

    def check(self, grid: Board) -> GridCheck:
        return check_grid(grid, self.board)

    # --- prompts ------------------------------------------------------------------------------------------------

    def full_system_prompt(self, role: str) -> str:
        size, box = self.board.size, box_size(self.board.size)
        rules = (
            f"Sudoku rules: fill every empty cell of the {size}x{size} grid with a digit 1-{size} so that every row, "
            f"every column and every {box}x{box} box contains each digit exactly once. Given cells never change."
        )
        grid_format = f"{size} lines of {size} digits separated by spaces (. for an empty cell)"
        if role == "tool":
            intro = (
                "You are the tool agent of a two-agent team solving a Sudoku. Your teammate, the plan agent, sees "
                "your result and the environment's rule check of it, then commits the board.\n" + rules + "\n"
            )
            if self.config.tool_mode == "code":
                task = (
                    "Write a Python program (standard library only) in one ```python code block. It reads the "
                    f"puzzle from standard input as {size} lines of {size} space-separated digits, 0 for an empty "
                    f"cell, and prints the solved grid in the same format. It runs with a memory limit and a time "
                    f"limit of {self.config.code_time_limit_s:g} s."
                )
            else:
                task = f"End your reply with the solved grid inside <answer></answer> as {grid_format}."
            return f"{intro}{task} {READ_LIMIT_NOTE}"
        intro = (
            "You are an agent solving a Sudoku on your own.\n"
            if self.config.single_agent
            else "You are the plan agent of a two-agent team solving a Sudoku. Your teammate, the tool agent, "
            "proposes a filled grid and the environment checks it against the rules; you commit the board.\n"
        )
        return (
            f"{intro}{rules}\nEnd your reply with the whole grid, given cells included, inside <answer></answer> as "
            f"{grid_format}. Your grid replaces every non-given cell of the board. A grid of the wrong size, a digit "
            f"out of range or a changed given cell is an invalid move: the board stays as it was. {READ_LIMIT_NOTE}"
        )

    def user_prompt(self, role: str) -> str:
        state, puzzle = self.state, self.board.puzzle
        turn = min(state.turn + 1, self.config.max_turns)
        parts = [f"Turn {turn} of {self.config.max_turns}.", "Puzzle (given cells):", render_grid(puzzle)]
        if state.grid != puzzle:
            parts += ["Current board:", render_grid(state.grid), "Board check: " + self.check(state.grid).report()]
        proposal = state.proposal
        if self.config.single_agent:
            parts.append("Commit your grid.")
        elif role == "plan":
            if proposal is None or proposal.turn != state.turn:
                parts.append("The tool agent has no proposal this turn.")
            elif proposal.grid is None:
                parts.append("Tool agent result: " + proposal.report)
            else:
                parts += ["Tool agent proposal:", render_grid(proposal.grid), "Check: " + proposal.report]
            parts.append("Commit your grid.")
        else:
            if proposal is not None:
                parts.append(f"Your proposal in turn {proposal.turn + 1}: " + proposal.report)
            parts.append("Write your program." if self.config.tool_mode == "code" else "Write your grid.")
        return "\n".join(parts)
