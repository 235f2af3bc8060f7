"""Sudoku grids: the rules check, solution counting, puzzle generation, and the grid text a model writes and reads.

Grid format, for every grid a role writes: `size` lines of `size` digits separated by spaces, empty cells as `.` or
`0`, preferably inside <answer></answer>. `parse_grid` also accepts box separators (`|`, `+`, `-`), brackets and
commas (JSON nested lists), row labels ("Row 1:"), one line of size*size cells, and prose around the grid. It reads
the reply's answer part (`verl_mas.env.replies.answer_part`: outside reasoning, the last 20,000 characters), and
within it the last <answer> block, else the last fenced block, else all of it; within that, the last run of grid
rows.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from functools import cached_property

from verl_mas.env.replies import answer_part, fenced_blocks, last_tagged
from verl_mas_envs.common import draw_board

Board = tuple[tuple[int, ...], ...]
Cell = tuple[int, int]

SIZES = (4, 9)
EMPTY_CHARS = "0._*?"

_ROW_LABEL_RE = re.compile(r"^\s*(?:row|r)\s*\d+\s*[:.)=-]?", re.IGNORECASE)
_ROW_NOISE_RE = re.compile(r"[\s,;|+\-\[\](){}'\"]")
_INLINE_JSON_GRID_RE = re.compile(r"\[\s*\[[^\[\]]*\](?:\s*,\s*\[[^\[\]]*\])*\s*\]")


@dataclass(frozen=True)
class SudokuBoard:
    """A puzzle with its unique solution; `givens` are the puzzle's filled cells."""

    puzzle: Board
    solution: Board

    @property
    def size(self) -> int:
        return len(self.puzzle)

    @cached_property
    def givens(self) -> frozenset[Cell]:
        return frozenset((r, c) for r, row in enumerate(self.puzzle) for c, value in enumerate(row) if value)


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
class ParsedGrid:
    """A grid read from text, or (grid None) why none could be read."""

    grid: Board | None
    error: str = ""


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


def check_grid(grid: Board, board: SudokuBoard) -> GridCheck:
    """What the rules say about `grid` as an answer to `board`'s puzzle."""
    return GridCheck(
        conflicts=find_conflicts(grid),
        changed_givens=tuple(sorted((r, c) for r, c in board.givens if grid[r][c] != board.puzzle[r][c])),
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


def generate_board(size: int, target_clues: int, seed: int, split: str) -> SudokuBoard:
    """The puzzle for (seed, split): a random solution drawn until it falls in `split`, then clues removed.

    The split is decided on the solution grid: a uniquely solvable puzzle determines its solution, so disjoint
    solutions make train and eval puzzles disjoint, and no eval answer is ever trained on.
    """
    solution, rng = draw_board(
        f"sudoku/{size}",
        seed,
        split,
        lambda rng: (random_solution(size, rng), rng),  # clues are removed with the same rng, for the chosen one only
        lambda drawn: f"sudoku{size}:{board_key(drawn[0])}",
    )
    return SudokuBoard(remove_clues(solution, target_clues, rng), solution)


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


def parse_grid(text: str, size: int) -> ParsedGrid:
    """The grid a model wrote, or the reason none could be read (see the module docstring for the format)."""
    text = answer_part(text)
    regions = []
    answer = last_tagged(text, "answer")
    if answer is not None:
        regions.append(answer)
    blocks = fenced_blocks(text)
    if blocks:
        regions.append(blocks[-1][1])
    regions.append(text)
    first_error = ""
    for region in regions:
        parsed = _parse_region(region, size)
        if parsed.grid is not None:
            return parsed
        first_error = first_error or parsed.error
    return ParsedGrid(None, first_error)


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


def _grid_row(line: str) -> str | None:
    """The cell characters of a line if it is a grid row; None for prose (anything else on the line)."""
    cells = _ROW_NOISE_RE.sub("", _ROW_LABEL_RE.sub("", line))
    if cells and all((ch.isascii() and ch.isdigit()) or ch in EMPTY_CHARS for ch in cells):
        return cells
    return None


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
