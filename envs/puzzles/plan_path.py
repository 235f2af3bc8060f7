"""Plan-Path: walk an agent through a walled grid to a goal; a tool agent proposes moves, a plan agent commits them.

Board: a `size` x `size` grid with round(wall_ratio * size^2) wall cells placed at random, a start and a goal on
distinct free cells, regenerated until the goal is reachable (BFS). Reference setting: 10x10, 22% walls.
Moves U/D/L/R go one cell; a move into a wall or off the grid is illegal (the list stops there, the move counts as
invalid). Reaching the goal solves the puzzle and ends the episode.

Rewards (the shared rule of `verl_mas_envs.puzzles.grid`), d = BFS distance to the goal (precomputed once per board),
d0 = d(start), s = the agent's cell before the role's list, s' = where it ends after n applied moves:

| role | outcome                             | team reward  | local reward                                 |
|------|-------------------------------------|--------------|----------------------------------------------|
| tool | moves read, simulated on a copy     | progress(s)  | what the plan would get for them             |
| both | unparsable; no code; program failed | progress(s)  | -0.5                                         |
| plan | reaches the goal                    | 1.0          | 0.5 + 0.5 * d(s) / n                         |
| plan | otherwise                           | progress(s') | 0.5 * clip((d(s) - d(s')) / d(s)) - 0.25 * i |

progress(x) = clip((d0 - d(x)) / d0) with clip to [-1, 1]; i = 1 if the list hit a wall or the edge (it stopped there;
that move counts as invalid), else 0.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from verl_mas.env import register_env
from verl_mas_envs.common import config_of, draw_board, is_number

from .grid import (
    Cell,
    GridConfig,
    GridPuzzleEnv,
    IllegalMove,
    bfs_distances,
    parse_grid_text,
    shift,
)

WALL, FLOOR, AGENT, GOAL = "#", ".", "A", "G"

EXPERT_PROGRAM = """\
import sys
from collections import deque

rows = [line.strip() for line in sys.stdin.read().splitlines() if line.strip()]
for r, row in enumerate(rows):
    for c, char in enumerate(row):
        if char == "A":
            start = (r, c)
        elif char == "G":
            goal = (r, c)
moves = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
previous = {start: None}
queue = deque([start])
while queue:
    cell = queue.popleft()
    if cell == goal:
        break
    for name, (dr, dc) in moves.items():
        r, c = cell[0] + dr, cell[1] + dc
        if 0 <= r < len(rows) and 0 <= c < len(rows[r]) and rows[r][c] != "#" and (r, c) not in previous:
            previous[(r, c)] = (cell, name)
            queue.append((r, c))
path = []
while previous[cell] is not None:
    cell, name = previous[cell]
    path.append(name)
print(" ".join(reversed(path)))
"""


@dataclass(frozen=True)
class PlanPathConfig(GridConfig):
    size: int = 10
    wall_ratio: float = 0.22

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.size, int) and self.size >= 2):
            raise ValueError(f"plan_path size must be an int >= 2, got {self.size!r}")
        ratio = self.wall_ratio
        if not (is_number(ratio) and 0.0 <= ratio < 1.0) or round(ratio * self.size**2) > self.size**2 - 2:
            raise ValueError(f"plan_path wall_ratio must leave two free cells, got {self.wall_ratio!r}")


@dataclass(frozen=True)
class PlanPathBoard:
    """An immutable board; `distances[r][c]` is the BFS distance from (r, c) to the goal (-1: unreachable)."""

    height: int
    width: int
    walls: frozenset[Cell]
    start: Cell
    goal: Cell
    distances: tuple[tuple[int, ...], ...]

    @classmethod
    def build(cls, height: int, width: int, walls: frozenset[Cell], start: Cell, goal: Cell) -> PlanPathBoard:
        distances = bfs_distances(height, width, goal, lambda cell: cell not in walls)
        return cls(height, width, walls, start, goal, distances)

    @classmethod
    def from_text(cls, text: str) -> PlanPathBoard:
        """A board from rows of `#` (wall), `.` (floor), `A` (start), `G` (goal)."""
        cells = dict(parse_grid_text(text))
        height, width = max(r for r, _ in cells) + 1, max(c for _, c in cells) + 1
        walls = frozenset(cell for cell, char in cells.items() if char == WALL)
        (start,) = (cell for cell, char in cells.items() if char == AGENT)
        (goal,) = (cell for cell, char in cells.items() if char == GOAL)
        return cls.build(height, width, walls, start, goal)

    def render(self, agent: Cell) -> str:
        def char(cell: Cell) -> str:
            if cell == agent:
                return AGENT
            return GOAL if cell == self.goal else WALL if cell in self.walls else FLOOR

        return "\n".join("".join(char((r, c)) for c in range(self.width)) for r in range(self.height))


def generate_board(seed: int, split: str, config: PlanPathConfig) -> PlanPathBoard:
    """The board for (seed, split): deterministic, solvable, and in `split` by the hash of its text."""
    return draw_board("plan_path", seed, split, lambda rng: _candidate(rng, config), lambda b: b.render(b.start))


def _candidate(rng: random.Random, config: PlanPathConfig) -> PlanPathBoard | None:
    cells = [(r, c) for r in range(config.size) for c in range(config.size)]
    walls = frozenset(rng.sample(cells, round(config.wall_ratio * len(cells))))
    start, goal = rng.sample([cell for cell in cells if cell not in walls], 2)
    board = PlanPathBoard.build(config.size, config.size, walls, start, goal)
    return board if board.distances[start[0]][start[1]] > 0 else None


@register_env("plan_path")
class PlanPathEnv(GridPuzzleEnv[PlanPathConfig, PlanPathBoard, Cell]):
    """Plan-Path for a tool agent and a plan agent (sequential); its options are `PlanPathConfig`'s."""

    rules = (
        "Plan-Path: move the agent A to the goal G. Walls # block the way and the agent cannot leave the grid; "
        "a move into a wall or off the grid is illegal. The puzzle is solved when A stands on G."
    )
    legend = "A = agent, G = goal, # = wall, . = free cell. U = row - 1, D = row + 1, L = column - 1, R = column + 1."
    expert_program = EXPERT_PROGRAM

    def __init__(self, **options: Any) -> None:
        super().__init__(config_of(PlanPathConfig, options))

    def generate_board(self, seed: int, split: str) -> PlanPathBoard:
        return generate_board(seed, split, self.config)

    def move(self, position: Cell, action: str) -> Cell | IllegalMove:
        row, col = shift(position, action)
        if not (0 <= row < self.board.height and 0 <= col < self.board.width):
            return IllegalMove("leaves the grid")
        if (row, col) in self.board.walls:
            return IllegalMove("walks into a wall")
        return row, col

    def distance(self, position: Cell) -> int | None:
        steps = self.board.distances[position[0]][position[1]]
        return steps if steps >= 0 else None

    def render(self, position: Cell) -> str:
        return self.board.render(position)

    def describe_position(self, position: Cell) -> str:
        return f"The agent is at {position}; the goal is at {self.board.goal}."
