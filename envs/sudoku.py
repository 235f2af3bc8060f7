"""Sudoku (4x4, 9x9, unique solutions) for a tool agent that proposes a grid and a plan agent that commits one.

Turn structure (sequential): the tool agent proposes a filled grid, either by writing a Python program that
prints it (`tool_mode="code"`, run in the sandbox with the puzzle on stdin) or by writing it directly
(`tool_mode="compact"`). The environment checks the proposal against the rules and shows the report to the
plan agent, which commits a grid to the shared board. Done when the board is solved.

Grid format, for every grid a role writes: `size` lines of `size` digits separated by spaces, empty cells
as `.` or `0`, preferably inside <answer></answer>. The parser also accepts box separators (`|`, `+`, `-`),
brackets and commas (JSON nested lists), row labels ("Row 1:"), one line of size*size cells, and prose around
the grid; it reads the last <answer> block, else the last fenced block, else the whole text (only the last
`MAX_PARSED_CHARS` characters), and within that the last run of grid rows.

Rewards. progress(g) = share of the puzzle's empty cells where grid g holds the solution's digit (1.0 exactly when
g is solved); violation(g) = 1 if g repeats a digit in a row, column or box or changes a given cell, else 0; a bad
grid is unparsable text, a wrong size or a digit out of range.

| role | outcome                                         | valid | team reward     | local reward                      |
|------|-------------------------------------------------|-------|-----------------|-----------------------------------|
| tool | grid g read (typed, or printed by the program)  | yes   | progress(board) | progress(g) - 0.25 * violation(g) |
| tool | no code block, program failed, or bad grid      | no    | progress(board) | -0.5                              |
| plan | grid g committed: board := g                    | yes   | progress(g)     | progress(g) - 0.25 * violation(g) |
| plan | bad grid or a given changed: board unchanged    | no    | progress(board) | -0.5                              |

The tool's move never changes the shared board, so its team reward is the board's current progress. A plan move,
valid or not, ends the turn.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, replace
from typing import Literal

from verl_mas.env import MultiAgentEnv, StepResult, Task, Workflow, register_env, split_of

Board = tuple[tuple[int, ...], ...]
Cell = tuple[int, int]
ToolMode = Literal["code", "compact"]

ROLES = ("tool", "plan")
SINGLE_AGENT_ROLES = ("plan",)
SIZES = (4, 9)
DEFAULT_CLUES = {4: 6, 9: 30}
INVALID_MOVE_PENALTY = -0.5
VIOLATION_PENALTY = 0.25
MAX_PARSED_CHARS = 20_000  # a grid is short and comes last; bounds parsing time on runaway outputs
MAX_GENERATION_ATTEMPTS = 1_000  # a board lands in a given split with probability >= 0.2 per attempt
EMPTY_CHARS = "0._*?"
STDERR_SHOWN_CHARS = 400

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_FENCE_RE = re.compile(r"```([^\n`]*)\n(.*?)(?:```|\Z)", re.DOTALL)
_ROW_LABEL_RE = re.compile(r"^\s*(?:row|r)\s*\d+\s*[:.)=-]?", re.IGNORECASE)
_ROW_NOISE_RE = re.compile(r"[\s,;|+\-\[\](){}'\"]")
_INLINE_JSON_GRID_RE = re.compile(r"\[\s*\[[^\[\]]*\](?:\s*,\s*\[[^\[\]]*\])*\s*\]")


@dataclass(frozen=True)
class SudokuConfig:
    """Constructor options; a task's options override them at reset."""

    size: int = 4
    clues: int | None = None  # target number of given cells (default per size); more remain if uniqueness needs
    tool_mode: ToolMode = "code"
    max_turns: int = 5
    single_agent: bool = False  # one agent ("plan") does the whole task: the paper's single-agent baseline
    # Prompts without the rules' prose (as for the grid puzzles): tiny models learn the format from the warm start.
    brief_prompts: bool = False

    def __post_init__(self) -> None:
        for key in ("single_agent", "brief_prompts"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"sudoku {key} must be true or false, got {getattr(self, key)!r}")
        if self.size not in SIZES:
            raise ValueError(f"sudoku size must be one of {SIZES}, got {self.size!r}")
        if self.clues is not None and not (isinstance(self.clues, int) and 0 <= self.clues < self.size**2):
            raise ValueError(f"sudoku clues must be an int in [0, {self.size**2}), got {self.clues!r}")
        if self.tool_mode not in ("code", "compact"):
            raise ValueError(f"sudoku tool_mode must be 'code' or 'compact', got {self.tool_mode!r}")
        if not (isinstance(self.max_turns, int) and self.max_turns >= 1):
            raise ValueError(f"sudoku max_turns must be an int >= 1, got {self.max_turns!r}")

    @property
    def target_clues(self) -> int:
        return DEFAULT_CLUES[self.size] if self.clues is None else self.clues


@dataclass(frozen=True)
class GridCheck:
    """What the rules say about a grid relative to the puzzle (uses no hidden information)."""

    conflicts: tuple[str, ...]
    changed_givens: tuple[Cell, ...]
    empty_cells: int

    @property
    def violation(self) -> bool:
        return bool(self.conflicts or self.changed_givens)

    @property
    def solves(self) -> bool:
        return self.empty_cells == 0 and not self.violation

    def report(self) -> str:
        if self.solves:
            return "complete, no conflicts, givens kept: this grid solves the puzzle."
        conflicts = "; ".join(self.conflicts) if self.conflicts else "none"
        changed = ", ".join(f"row {r + 1} col {c + 1}" for r, c in self.changed_givens) or "none"
        return f"empty cells: {self.empty_cells}; conflicts: {conflicts}; changed givens: {changed}."


@dataclass(frozen=True)
class ToolProposal:
    """The tool agent's latest result as the plan agent sees it."""

    turn: int
    grid: Board | None
    report: str


@dataclass(frozen=True)
class ParsedGrid:
    grid: Board | None
    error: str = ""


# ----------------------------------------------------------------------------------------------- rules and solver


def box_size(size: int) -> int:
    return math.isqrt(size)


def find_conflicts(grid: Board) -> tuple[str, ...]:
    """Every row, column and box holding a digit more than once, in natural language (1-based)."""
    size, box = len(grid), box_size(len(grid))
    units: list[tuple[str, list[int]]] = []
    for i in range(size):
        units.append((f"row {i + 1}", [grid[i][c] for c in range(size)]))
        units.append((f"column {i + 1}", [grid[r][i] for r in range(size)]))
        top, left = (i // box) * box, (i % box) * box
        units.append((f"box {i + 1}", [grid[top + r][left + c] for r in range(box) for c in range(box)]))
    conflicts = []
    for name, values in units:
        repeated = sorted({v for v in values if v and values.count(v) > 1})
        conflicts.extend(f"{name} has {values.count(v)}x {v}" for v in repeated)
    return tuple(conflicts)


def check_grid(grid: Board, puzzle: Board, givens: frozenset[Cell]) -> GridCheck:
    return GridCheck(
        conflicts=find_conflicts(grid),
        changed_givens=tuple(sorted(cell for cell in givens if grid[cell[0]][cell[1]] != puzzle[cell[0]][cell[1]])),
        empty_cells=sum(v == 0 for row in grid for v in row),
    )


def count_solutions(grid: Board, limit: int = 2) -> int:
    """Number of completions of `grid`, counting no further than `limit` (0 if the givens conflict)."""
    size, box = len(grid), box_size(len(grid))
    all_digits = sum(1 << d for d in range(1, size + 1))
    rows, cols, boxes = [0] * size, [0] * size, [0] * size
    open_cells: list[tuple[int, int, int]] = []
    for r in range(size):
        for c in range(size):
            b = (r // box) * box + c // box
            if grid[r][c] == 0:
                open_cells.append((r, c, b))
                continue
            bit = 1 << grid[r][c]
            if (rows[r] | cols[c] | boxes[b]) & bit:
                return 0
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit

    def search(n_open: int) -> int:
        if n_open == 0:
            return 1
        # most constrained open cell first: keeps the tree small enough for 9x9 uniqueness checks
        best, best_mask, best_count = 0, 0, size + 1
        for i in range(n_open):
            r, c, b = open_cells[i]
            mask = all_digits & ~(rows[r] | cols[c] | boxes[b])
            count = mask.bit_count()
            if count < best_count:
                best, best_mask, best_count = i, mask, count
                if count <= 1:
                    break
        if best_count == 0:
            return 0
        open_cells[best], open_cells[n_open - 1] = open_cells[n_open - 1], open_cells[best]
        r, c, b = open_cells[n_open - 1]
        found = 0
        while best_mask and found < limit:
            bit = best_mask & -best_mask
            best_mask ^= bit
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
            found += search(n_open - 1)
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[b] ^= bit
        return found

    return search(len(open_cells))


# ----------------------------------------------------------------------------------------------- generation


def random_solution(size: int, rng: random.Random) -> Board:
    """A full valid grid: a base pattern shuffled by digit relabelling, row/column moves within bands, transpose."""
    box = box_size(size)

    def shuffled_lines() -> list[int]:
        bands = rng.sample(range(box), box)
        return [band * box + line for band in bands for line in rng.sample(range(box), box)]

    row_order, col_order = shuffled_lines(), shuffled_lines()
    digits = rng.sample(range(1, size + 1), size)
    grid = [[digits[(box * (r % box) + r // box + c) % size] for c in col_order] for r in row_order]
    if rng.random() < 0.5:
        grid = [list(column) for column in zip(*grid, strict=True)]
    return tuple(tuple(row) for row in grid)


def remove_clues(solution: Board, target_clues: int, rng: random.Random) -> Board:
    """Blank cells in random order while the puzzle keeps a unique solution, down to `target_clues` givens."""
    size = len(solution)
    grid = [list(row) for row in solution]
    clues = size * size
    for index in rng.sample(range(size * size), size * size):
        if clues <= target_clues:
            break
        r, c = divmod(index, size)
        grid[r][c] = 0
        if count_solutions(tuple(tuple(row) for row in grid)) == 1:
            clues -= 1
        else:
            grid[r][c] = solution[r][c]
    return tuple(tuple(row) for row in grid)


def generate_puzzle(config: SudokuConfig, seed: int, split: str) -> tuple[Board, Board]:
    """(puzzle, solution) for a seed, drawn until the board falls in `split`.

    The split is decided on the solution grid: a uniquely solvable puzzle determines its solution, so
    disjoint solutions make train and eval puzzles disjoint, and no eval answer is ever trained on.
    """
    for attempt in range(MAX_GENERATION_ATTEMPTS):
        rng = random.Random(f"sudoku/{config.size}/{seed}/{attempt}")
        solution = random_solution(config.size, rng)
        if split_of(f"sudoku{config.size}:{board_key(solution)}") == split:
            return remove_clues(solution, config.target_clues, rng), solution
    raise RuntimeError(f"no {split} sudoku board after {MAX_GENERATION_ATTEMPTS} attempts (seed {seed})")


# ----------------------------------------------------------------------------------------------- text


def board_key(grid: Board) -> str:
    """Canonical one-line text of a grid (0 for empty)."""
    return "/".join("".join(str(v) for v in row) for row in grid)


def render_grid(grid: Board) -> str:
    """Rows of space-separated digits with box separators; `.` marks an empty cell."""
    size, box = len(grid), box_size(len(grid))
    lines = []
    for r, row in enumerate(grid):
        if r and r % box == 0:
            lines.append("+".join(["-" * (2 * box - 1)] * box).replace("+", "-+-"))
        cells = [str(v) if v else "." for v in row]
        lines.append(" | ".join(" ".join(cells[i : i + box]) for i in range(0, size, box)))
    return "\n".join(lines)


def stdin_text(grid: Board) -> str:
    """The puzzle as the tool program reads it: one line per row, space-separated digits, 0 for empty."""
    return "\n".join(" ".join(str(v) for v in row) for row in grid) + "\n"


def _grid_row(line: str) -> str | None:
    """The cell characters of a line if it is a grid row; None for prose (anything else on the line)."""
    cells = _ROW_NOISE_RE.sub("", _ROW_LABEL_RE.sub("", line))
    if cells and all((ch.isascii() and ch.isdigit()) or ch in EMPTY_CHARS for ch in cells):
        return cells
    return None


def _parse_region(region: str, size: int) -> ParsedGrid:
    """The last run of grid rows in `region` that reads as a grid; else the reason the last run does not."""
    runs: list[list[str]] = [[]]
    region = _INLINE_JSON_GRID_RE.sub(lambda match: f"\n{match.group(0)}\n", region)  # a nested list inside prose
    for line in region.splitlines():
        cells = _grid_row(line)
        if cells is not None:
            runs[-1].append(cells)
        elif _ROW_NOISE_RE.sub("", line):  # prose ends a run; blank and separator lines do not
            runs.append([])
    parsed = [_grid_from_rows(run, size) for run in reversed(runs) if run]
    if not parsed:
        return ParsedGrid(None, "no grid found")
    return next((p for p in parsed if p.grid is not None), parsed[0])


def _grid_from_rows(rows: list[str], size: int) -> ParsedGrid:
    if len(rows[-1]) == size * size:
        rows = [rows[-1][i : i + size] for i in range(0, size * size, size)]
    rows = rows[-size:]
    if len(rows) != size or any(len(row) != size for row in rows):
        shape = ", ".join(str(len(row)) for row in rows)
        return ParsedGrid(None, f"wrong grid size: {len(rows)} rows of {shape} cells, expected {size} rows of {size}")
    grid = tuple(tuple(0 if ch in EMPTY_CHARS else int(ch) for ch in row) for row in rows)
    if any(v > size for row in grid for v in row):
        return ParsedGrid(None, f"digit out of range: use 1-{size} (or . for empty)")
    return ParsedGrid(grid)


def parse_grid(text: str, size: int) -> ParsedGrid:
    """The grid a model wrote, or the reason none could be read (see the module docstring for the format)."""
    text = text[-MAX_PARSED_CHARS:]
    regions = []
    answers = _ANSWER_RE.findall(text)
    if answers:
        regions.append(answers[-1])
    fences = _FENCE_RE.findall(text)
    if fences:
        regions.append(fences[-1][1])
    regions.append(text)
    first_error = ""
    for region in regions:
        parsed = _parse_region(region, size)
        if parsed.grid is not None:
            return parsed
        first_error = first_error or parsed.error
    return ParsedGrid(None, first_error)


def extract_program(text: str) -> str | None:
    """The last ```python fenced block (else the last fenced block); None if the text has none."""
    fences = _FENCE_RE.findall(text)
    python = [body for lang, body in fences if lang.strip().lower() in ("python", "py", "python3")]
    blocks = python or [body for _, body in fences]
    return blocks[-1] if blocks and blocks[-1].strip() else None


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


# ----------------------------------------------------------------------------------------------- environment


@register_env("sudoku")
class SudokuEnv(MultiAgentEnv):
    """A Sudoku board shared by a tool agent (proposes) and a plan agent (commits)."""

    def __init__(
        self,
        size: int = 4,
        clues: int | None = None,
        tool_mode: ToolMode = "code",
        max_turns: int = 5,
        single_agent: bool = False,
        brief_prompts: bool = False,
    ):
        self.base_config = SudokuConfig(size, clues, tool_mode, max_turns, single_agent, brief_prompts)
        self.config = self.base_config
        self.puzzle: Board = ()
        self.solution: Board = ()
        self.givens: frozenset[Cell] = frozenset()
        self.board: Board = ()
        self.turn = 0  # completed turns (plan commits)
        self.proposal: ToolProposal | None = None

    # -- MultiAgentEnv

    def workflow(self) -> Workflow:
        return Workflow(roles=self.roles, mode="sequential", max_turns=self.config.max_turns)

    @property
    def roles(self) -> tuple[str, ...]:
        return SINGLE_AGENT_ROLES if self.config.single_agent else ROLES

    def reset(self, task: Task) -> None:
        try:
            self.config = replace(self.base_config, **task.options)
        except TypeError as exc:
            raise ValueError(f"bad sudoku options in task {task.uid!r}: {exc}") from exc
        self.puzzle, self.solution = generate_puzzle(self.config, task.seed, task.split)
        size = self.config.size
        self.givens = frozenset((r, c) for r in range(size) for c in range(size) if self.puzzle[r][c])
        self.board = self.puzzle
        self.turn = 0
        self.proposal = None

    def observe(self, role: str) -> list[dict[str, str]]:
        self._require_role(role)
        if self.config.brief_prompts:
            system = "You solve the Sudoku alone." if self.config.single_agent else f"You are the {role} agent."
        else:
            system = self._tool_system() if role == "tool" else self._plan_system()
        return [{"role": "system", "content": system}, {"role": "user", "content": self._user_message(role)}]

    def step(self, role: str, text: str) -> StepResult:
        self._require_role(role)
        if self.done:
            raise RuntimeError("step() on a solved sudoku: the episode is over")
        return self._tool_step(text) if role == "tool" else self._plan_step(text)

    def clone(self) -> SudokuEnv:
        other = SudokuEnv.__new__(SudokuEnv)
        # every field is immutable (tuples, frozensets, frozen dataclasses), so sharing them is safe
        other.base_config, other.config = self.base_config, self.config
        other.puzzle, other.solution, other.givens = self.puzzle, self.solution, self.givens
        other.board, other.turn, other.proposal = self.board, self.turn, self.proposal
        return other

    @property
    def done(self) -> bool:
        return bool(self.board) and self.board == self.solution

    def success(self) -> bool:
        return self.done

    def expert(self, role: str) -> str:
        self._require_role(role)
        if role == "tool" and self.config.tool_mode == "code":
            return f"```python\n{EXPERT_PROGRAM}```"
        return f"<answer>\n{stdin_text(self.solution)}</answer>"

    # -- scoring

    def progress(self, grid: Board) -> float:
        """Share of the puzzle's empty cells that hold the solution's digit (1.0 exactly when solved)."""
        empty = [(r, c) for r in range(self.config.size) for c in range(self.config.size) if (r, c) not in self.givens]
        return sum(grid[r][c] == self.solution[r][c] for r, c in empty) / len(empty)

    def check(self, grid: Board) -> GridCheck:
        return check_grid(grid, self.puzzle, self.givens)

    # -- moves

    def _tool_step(self, text: str) -> StepResult:
        team = self.progress(self.board)
        if self.config.tool_mode == "code":
            parsed, failure = self._run_tool_program(text)
        else:
            parsed = parse_grid(text, self.config.size)
            failure = parsed.error
        if parsed is None or parsed.grid is None:
            self.proposal = ToolProposal(self.turn, None, f"no usable grid: {failure}")
            return StepResult(team, INVALID_MOVE_PENALTY, self.done, valid=False, info={"error": failure})
        check = self.check(parsed.grid)
        self.proposal = ToolProposal(self.turn, parsed.grid, check.report())
        local = self.progress(parsed.grid) - VIOLATION_PENALTY * check.violation
        return StepResult(team, local, self.done, info={"check": check.report()})

    def _run_tool_program(self, text: str) -> tuple[ParsedGrid | None, str]:
        program = extract_program(text)
        if program is None:
            return None, "no ```python code block"
        from verl_mas.sandbox import run_python  # lazy: only code mode needs the sandbox

        result = run_python(program, stdin=stdin_text(self.puzzle))
        if not result.ok:
            if result.timed_out:
                reason = "time limit exceeded"
            elif result.memory_exceeded:
                reason = "memory limit exceeded"
            else:
                reason = f"exit code {result.exit_code}"
            stderr = result.stderr.strip()[-STDERR_SHOWN_CHARS:]
            return None, f"program failed ({reason})" + (f": {stderr}" if stderr else "")
        parsed = parse_grid(result.stdout, self.config.size)
        return parsed, f"program output unusable: {parsed.error}" if parsed.grid is None else ""

    def _plan_step(self, text: str) -> StepResult:
        parsed = parse_grid(text, self.config.size)
        error = parsed.error
        if parsed.grid is not None:
            changed = self.check(parsed.grid).changed_givens
            if changed:
                error = "changes given cells " + ", ".join(f"row {r + 1} col {c + 1}" for r, c in changed)
        if parsed.grid is None or error:
            self.turn += 1
            team = self.progress(self.board)
            return StepResult(team, INVALID_MOVE_PENALTY, self.done, valid=False, info={"error": error})
        self.board = parsed.grid
        self.turn += 1
        team = self.progress(self.board)
        check = self.check(self.board)
        return StepResult(team, team - VIOLATION_PENALTY * check.violation, self.done, info={"check": check.report()})

    # -- prompts

    def _rules(self) -> str:
        size, box = self.config.size, box_size(self.config.size)
        return (
            f"Sudoku rules: fill every empty cell of the {size}x{size} grid with a digit 1-{size} so that every row, "
            f"every column and every {box}x{box} box contains each digit exactly once. Given cells never change."
        )

    def _grid_format(self) -> str:
        size = self.config.size
        return f"{size} lines of {size} digits separated by spaces (. for an empty cell)"

    def _tool_system(self) -> str:
        intro = (
            "You are the tool agent of a two-agent team solving a Sudoku. Your teammate, the plan agent, sees your "
            "result and the environment's rule check of it, then commits the board.\n" + self._rules() + "\n"
        )
        if self.config.tool_mode == "code":
            size = self.config.size
            return intro + (
                "Write a Python program (standard library only) in one ```python code block. It reads the puzzle "
                f"from standard input as {size} lines of {size} space-separated digits, 0 for an empty cell, and "
                f"prints the solved grid in the same format. It runs with time and memory limits."
            )
        return intro + f"Write the solved grid inside <answer></answer> as {self._grid_format()}."

    def _plan_system(self) -> str:
        intro = (
            "You are an agent solving a Sudoku on your own.\n"
            if self.config.single_agent
            else "You are the plan agent of a two-agent team solving a Sudoku. Your teammate, the tool agent, "
            "proposes a filled grid and the environment checks it against the rules; you commit the board.\n"
        )
        return (
            intro
            + self._rules()
            + "\nCommit the whole grid, given cells included, inside <answer></answer> as "
            + self._grid_format()
            + ". Your grid replaces every non-given cell of the board. A grid of the wrong size, a digit out of "
            "range or a changed given cell is an invalid move: the board stays as it was."
        )

    def _user_message(self, role: str) -> str:
        parts = [f"Turn {self.turn + 1} of {self.config.max_turns}.", "Puzzle (given cells):", render_grid(self.puzzle)]
        if self.board != self.puzzle:
            parts += ["Current board:", render_grid(self.board), "Board check: " + self.check(self.board).report()]
        if self.config.single_agent:
            parts.append("Commit your grid.")
        elif role == "plan":
            if self.proposal is None or self.proposal.turn != self.turn:
                parts.append("The tool agent has no proposal this turn.")
            elif self.proposal.grid is None:
                parts.append("Tool agent result: " + self.proposal.report)
            else:
                parts += ["Tool agent proposal:", render_grid(self.proposal.grid), "Check: " + self.proposal.report]
            parts.append("Commit your grid.")
        else:
            if self.proposal is not None:
                parts.append(f"Your proposal in turn {self.proposal.turn + 1}: " + self.proposal.report)
            parts.append("Write your program." if self.config.tool_mode == "code" else "Write your grid.")
        return "\n".join(parts)

    def _require_role(self, role: str) -> None:
        if role not in self.roles:
            raise ValueError(f"unknown sudoku role {role!r}; roles are {self.roles}")
        if not self.board:
            raise RuntimeError("sudoku environment used before reset()")
