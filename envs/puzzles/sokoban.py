"""Sokoban: push every box onto a goal; a tool agent proposes moves, a plan agent commits them.

Board: a `size` x `size` room walled at the border, interior cells walls with probability `wall_ratio` (the free
cells must stay connected), `boxes` goals on free cells. Reference setting: 6x6, one box.
Generation is reverse play done exhaustively: a BFS backwards from every solved position (boxes on the goals,
player anywhere), with pulls as the reverse of pushes, finds every position from which the puzzle is solvable
and its optimal number of moves. The start is drawn uniformly from those positions with no box on a goal.
The table is kept with the (immutable) board: it gives d(position) for the rewards and the expert, and any
position missing from it is a deadlock (a box in a non-goal corner, against a wall with no goal, ... — exactly
"no solution from here"), which ends the episode as a failure. Boards whose table would exceed
`max_solver_states` positions are refused, so size and box count are bounded by what exact solving affords
(6x6 with 1-2 boxes and 8x8 with 2 boxes take well under a second).
Moves U/D/L/R walk one cell; walking into a box pushes it one cell on if that cell is free. Walking into a wall,
or pushing a box into a wall or another box, is illegal (the list stops there).

Rewards (the shared rule of `verl_mas_envs.puzzles.grid`), d = optimal moves to solve from the table, d0 = d(start),
s = position before the role's list, s' = where it ends after n applied moves:

| role | outcome                             | team reward  | local reward                                 |
|------|-------------------------------------|--------------|----------------------------------------------|
| tool | moves read, simulated on a copy     | progress(s)  | what the plan would get for them             |
| both | unparsable; no code; program failed | progress(s)  | -0.5                                         |
| plan | all boxes on goals                  | 1.0          | 0.5 + 0.5 * d(s) / n                         |
| plan | deadlock: the episode fails         | -1.0         | -0.5                                         |
| plan | otherwise                           | progress(s') | 0.5 * clip((d(s) - d(s')) / d(s)) - 0.25 * i |

progress(x) = clip((d0 - d(x)) / d0) with clip to [-1, 1]; i = 1 if the list hit an illegal move (it stopped there;
that move counts as invalid), else 0.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from verl_mas.env import register_env
from verl_mas_envs.common import config_of, draw_board, is_number, require_ints

from .grid import (
    MOVES,
    Cell,
    GridConfig,
    GridPuzzleEnv,
    IllegalMove,
    bfs_distances,
    parse_grid_text,
    shift,
)

WALL, FLOOR, GOAL, BOX, BOX_ON_GOAL, PLAYER, PLAYER_ON_GOAL = "#", "_", ".", "$", "*", "@", "+"

EXPERT_PROGRAM = """\
import sys
from collections import deque

rows = [line.strip() for line in sys.stdin.read().splitlines() if line.strip()]
walls, goals, boxes = set(), set(), set()
for r, row in enumerate(rows):
    for c, char in enumerate(row):
        if char == "#":
            walls.add((r, c))
        if char in ".*+":
            goals.add((r, c))
        if char in "$*":
            boxes.add((r, c))
        if char in "@+":
            player = (r, c)
moves = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
state = (player, frozenset(boxes))
previous = {state: None}
queue = deque([state])
while queue:
    state = queue.popleft()
    (pr, pc), boxes = state
    if boxes == goals:
        break
    for name, (dr, dc) in moves.items():
        cell = (pr + dr, pc + dc)
        if cell in walls:
            continue
        if cell in boxes:
            beyond = (pr + 2 * dr, pc + 2 * dc)
            if beyond in walls or beyond in boxes:
                continue
            following = (cell, (boxes - {cell}) | {beyond})
        else:
            following = (cell, boxes)
        if following not in previous:
            previous[following] = (state, name)
            queue.append(following)
else:
    sys.exit("no solution")
path = []
while previous[state] is not None:
    state, name = previous[state]
    path.append(name)
print(" ".join(reversed(path)))
"""


class SokobanPosition(NamedTuple):
    player: Cell
    boxes: tuple[Cell, ...]  # sorted, so equal positions compare and hash equal


@dataclass(frozen=True)
class SokobanConfig(GridConfig):
    size: int = 6
    boxes: int = 1
    wall_ratio: float = 0.1
    max_solver_states: int = 200_000

    def __post_init__(self) -> None:
        super().__post_init__()
        # Only what can be built passes: a box moves only along three free cells in a line (player, box, target),
        # so a room needs an interior of 3x3; and each box starts off a goal, so the floor holds 2 cells per box.
        if not (isinstance(self.size, int) and self.size >= 5):
            raise ValueError(f"sokoban size must be an int >= 5, got {self.size!r}")
        most = (self.size - 2) ** 2 // 2
        if not (isinstance(self.boxes, int) and 1 <= self.boxes <= most):
            raise ValueError(f"sokoban boxes must be an int in [1, {most}] for size {self.size}, got {self.boxes!r}")
        if not (is_number(self.wall_ratio) and 0.0 <= self.wall_ratio < 1.0):
            raise ValueError(f"sokoban wall_ratio must be in [0, 1), got {self.wall_ratio!r}")
        require_ints(self, max_solver_states=1)


@dataclass(frozen=True)
class SokobanBoard:
    """An immutable board with its exact solution table (shared, never mutated, by every clone)."""

    height: int
    width: int
    floor: frozenset[Cell]
    goals: tuple[Cell, ...]
    start: SokobanPosition
    distances: Mapping[SokobanPosition, int]  # optimal moves to solve, for every solvable position

    @classmethod
    def from_text(cls, text: str) -> SokobanBoard:
        """A board from rows of `#` wall, `_` floor, `.` goal, `$` box, `*` box on goal, `@` player, `+` on goal."""
        cells = dict(parse_grid_text(text))
        height, width = max(r for r, _ in cells) + 1, max(c for _, c in cells) + 1
        floor = frozenset(cell for cell, char in cells.items() if char != WALL)
        goals = tuple(sorted(cell for cell, char in cells.items() if char in (GOAL, BOX_ON_GOAL, PLAYER_ON_GOAL)))
        boxes = tuple(sorted(cell for cell, char in cells.items() if char in (BOX, BOX_ON_GOAL)))
        (player,) = (cell for cell, char in cells.items() if char in (PLAYER, PLAYER_ON_GOAL))
        start = SokobanPosition(player, boxes)
        return cls(
            height, width, floor, goals, start, solvable_positions(floor, goals, SokobanConfig.max_solver_states)
        )

    def render(self, position: SokobanPosition) -> str:
        goals = set(self.goals)

        def char(cell: Cell) -> str:
            if cell not in self.floor:
                return WALL
            if cell == position.player:
                return PLAYER_ON_GOAL if cell in goals else PLAYER
            if cell in position.boxes:
                return BOX_ON_GOAL if cell in goals else BOX
            return GOAL if cell in goals else FLOOR

        return "\n".join("".join(char((r, c)) for c in range(self.width)) for r in range(self.height))


def solvable_positions(floor: frozenset[Cell], goals: tuple[Cell, ...], max_states: int) -> dict[SokobanPosition, int]:
    """Every position from which the boxes can reach `goals`, with its optimal number of moves.

    BFS backwards from the solved positions: a predecessor is the player one cell back, either having simply
    walked (boxes unchanged) or having pushed the box now ahead of it (the reverse of that push is a pull).
    """
    distances: dict[SokobanPosition, int] = {}
    frontier: deque[SokobanPosition] = deque()
    for player in sorted(floor - set(goals)):
        solved = SokobanPosition(player, goals)
        distances[solved] = 0
        frontier.append(solved)
    while frontier:
        position = frontier.popleft()
        player, boxes = position
        moves = distances[position] + 1
        for dr, dc in MOVES.values():
            back = (player[0] - dr, player[1] - dc)
            if back not in floor or back in boxes:
                continue
            predecessors = [SokobanPosition(back, boxes)]
            ahead = (player[0] + dr, player[1] + dc)
            if ahead in boxes:
                predecessors.append(SokobanPosition(back, tuple(sorted(player if b == ahead else b for b in boxes))))
            for predecessor in predecessors:
                if predecessor not in distances:
                    distances[predecessor] = moves
                    frontier.append(predecessor)
        if len(distances) > max_states:
            raise ValueError(f"sokoban board has more than {max_states} solvable positions; use fewer boxes or cells")
    return distances


def generate_board(seed: int, split: str, config: SokobanConfig) -> SokobanBoard:
    """The board for (seed, split): deterministic, solvable, and in `split` by the hash of its text."""
    return draw_board("sokoban", seed, split, lambda rng: _candidate(rng, config), lambda b: b.render(b.start))


def _candidate(rng: random.Random, config: SokobanConfig) -> SokobanBoard | None:
    interior = [(r, c) for r in range(1, config.size - 1) for c in range(1, config.size - 1)]
    floor = frozenset(cell for cell in interior if rng.random() >= config.wall_ratio)
    if len(floor) < config.boxes + 2:
        return None
    first = min(floor)
    reach = bfs_distances(config.size, config.size, first, lambda cell: cell in floor)
    if any(reach[r][c] < 0 for r, c in floor):
        return None
    goals = tuple(sorted(rng.sample(sorted(floor), config.boxes)))
    distances = solvable_positions(floor, goals, config.max_solver_states)
    starts = sorted(p for p in distances if not set(p.boxes) & set(goals))
    if not starts:
        return None
    return SokobanBoard(config.size, config.size, floor, goals, rng.choice(starts), distances)


@register_env("sokoban")
class SokobanEnv(GridPuzzleEnv[SokobanConfig, SokobanBoard, SokobanPosition]):
    """Sokoban for a tool agent and a plan agent (sequential); its options are `SokobanConfig`'s."""

    rules = (
        "Sokoban: you are the player @ and must push every box $ onto a goal (.). Each move walks one cell; "
        "walking into a box pushes it one cell further if that cell is free. Boxes cannot be pulled and only one "
        "box can be pushed at a time. Walking into a wall, or pushing a box into a wall or another box, is illegal. "
        "Pushing a box where it can never reach a goal (e.g. into a corner that is not a goal) is a deadlock: the "
        "episode ends as a failure. The puzzle is solved when every box is on a goal."
    )
    legend = (
        "# = wall, _ = floor, . = goal, $ = box, * = box on a goal, @ = player, + = player on a goal. "
        "U = row - 1, D = row + 1, L = column - 1, R = column + 1."
    )
    expert_program = EXPERT_PROGRAM

    def __init__(self, **options: Any) -> None:
        super().__init__(config_of(SokobanConfig, options))

    def generate_board(self, seed: int, split: str) -> SokobanBoard:
        return generate_board(seed, split, self.config)

    def move(self, position: SokobanPosition, action: str) -> SokobanPosition | IllegalMove:
        floor = self.board.floor
        target = shift(position.player, action)
        if target not in floor:
            return IllegalMove("walks into a wall")
        if target not in position.boxes:
            return SokobanPosition(target, position.boxes)
        beyond = shift(target, action)
        if beyond not in floor:
            return IllegalMove("pushes a box into a wall")
        if beyond in position.boxes:
            return IllegalMove("pushes a box into another box")
        return SokobanPosition(target, tuple(sorted(beyond if box == target else box for box in position.boxes)))

    def distance(self, position: SokobanPosition) -> int | None:
        return self.board.distances.get(position)

    def render(self, position: SokobanPosition) -> str:
        return self.board.render(position)

    def describe_position(self, position: SokobanPosition) -> str:
        boxes = ", ".join(map(str, position.boxes))
        goals = ", ".join(map(str, self.board.goals))
        return f"The player is at {position.player}; boxes at {boxes}; goals at {goals}."
