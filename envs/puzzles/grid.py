"""The grid puzzles' rules (Plan-Path, Sokoban): grid geometry, action lists, moves simulated, rewards, prompts.

Action lists. Roles write moves as U/D/L/R letters, words (up, down, left, right) or arrows, in any case,
separated by anything: spaces, commas, quotes, brackets (a JSON list works). `parse_actions` reads, in order:
  1. the reply's answer part (`verl_mas.env.replies.answer_part`): the text after the last `</think>` and before
     any unclosed `<think>` (reasoning never counts), of which only the last 20,000 characters;
  2. within that, the last <answer>...</answer> block if there is one;
  3. within that, the text after the last marker such as "Actions:", "Moves:", "Final answer:", its word maybe
     in markdown emphasis ("**Actions**:"), (the rest of that line, or a whole [...] list that starts there); else
     the last [...] list; else all of it.
The chosen segment must hold only moves and the filler words in `FILLER_WORDS`: any other word, a number
("R 3"), or a foreign symbol makes the output unparsable, never guessed at. Runs of capital letters such as
"UURD" are read letter by letter. An empty list or more than `MAX_ACTIONS` moves is unparsable too.

Turns follow the tool/plan protocol (`toolplan`); the answer is an action list. A tool proposal (typed
in compact mode, printed by its program in code mode) is simulated on the current board (nothing is committed) and
the plan agent is shown where it leads. The plan agent's action list is applied in order; an illegal move stops the
list there (the moves before it stay applied); solving the puzzle or reaching a deadlock stops it too and ends the
episode.

Rewards. d(s) = optimal number of moves from position s to a solution (BFS); d0 = d(start); a move list that
was read is simulated from the position s before it, stopping at an illegal move, the solution or a deadlock,
after n applied moves, ending at s'. clip(x) clips x to [-1, 1].

| reward | situation                                                    | value                                       |
|--------|--------------------------------------------------------------|---------------------------------------------|
| team   | solved                                                       | 1.0                                         |
| team   | deadlocked (Sokoban: no solution from here)                  | -1.0                                        |
| team   | otherwise (also after a tool move, which changes nothing)    | clip((d0 - d(s)) / d0)                      |
| local  | unparsable text; code mode: no code block, program failed    | -0.5                                        |
| local  | moves reach the solution                                     | 0.5 + 0.5 * d(s) / n  (1.0 if optimal)      |
| local  | moves end in a deadlock                                      | -0.5                                        |
| local  | otherwise                                                    | 0.5 * clip((d(s) - d(s')) / d(s))           |
| local  | ... with progress_reward="pace", t turns left (this one too) | 0.5 * clip((d(s) - d(s')) / ceil(d(s) / t)) |
| local  | ... and the list stopped at an illegal move (also invalid)   | minus 0.25                                  |

`progress_reward="pace"` rates progress against the moves still needed per remaining turn instead of against the
whole distance, so a list that keeps the pace to finish in time earns the full 0.5; by default one safe move
earns 0.5 / d(s) whatever the turns left, which lets a weak policy settle on one move per turn and run out.

The tool's local reward rates its simulated proposal, the plan's local reward its committed moves, by the
same rule. StepResult.valid is False for unparsable text and for a list that hit an illegal move.
"""

from __future__ import annotations

import abc
import math
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Generic, Literal, Protocol, TypeVar

from verl_mas.env.replies import answer_part, last_tagged
from verl_mas_envs.common import READ_LIMIT_NOTE, Unreadable

from .toolplan import EpisodeState, Move, ToolPlanConfig, ToolPlanEnv

Cell = tuple[int, int]  # (row, column); row 0 is the top row
ProgressReward = Literal["fraction", "pace"]
Actions = tuple[str, ...]

MOVES: dict[str, Cell] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
MAX_ACTIONS = 100
FILLER_WORDS = frozenset({"and", "then", "go", "move", "moves", "step", "steps"})

DEADLOCK_MOVE_REWARD = -0.5
ILLEGAL_MOVE_PENALTY = 0.25

_ACTION_WORDS = {
    **{letter.lower(): letter for letter in MOVES},
    "up": "U",
    "down": "D",
    "left": "L",
    "right": "R",
    "↑": "U",
    "↓": "D",
    "←": "L",
    "→": "R",
}
# The marker's word may be set in markdown emphasis with the colon outside it, "**Actions**: U R", as chat models write.
_MARKER = re.compile(
    r"\b(?:final\s+answer|answer|actions?(?:\s+list)?|moves?|path|solution)\s*[*_]*\s*[:=]", re.IGNORECASE
)
_BRACKETED = re.compile(r"\[([^\[\]]*)\]")
# Words, numbers, and any single symbol that is not separator punctuation (those become unparsable tokens).
_TOKEN = re.compile(r"[A-Za-z]+|[0-9]+|[^\s\[\](){}<>,;:.'\"`*|_=-]")


def shift(cell: Cell, action: str) -> Cell:
    dr, dc = MOVES[action]
    return cell[0] + dr, cell[1] + dc


def parse_actions(text: str) -> Actions | None:
    """The action list in a reply as a tuple of U/D/L/R, or None if there is none (see the module docstring)."""
    text = answer_part(text)
    answer = last_tagged(text, "answer")
    if answer is not None:
        text = answer
    markers = list(_MARKER.finditer(text))
    if markers:
        segment = _segment_after(text, markers[-1].end())
    else:
        lists = _BRACKETED.findall(text)
        segment = lists[-1] if lists else text
    return _read_moves(segment)


def _segment_after(text: str, start: int) -> str:
    rest = text[start:].lstrip()
    if rest.startswith("["):
        end = rest.find("]")
        return rest if end < 0 else rest[: end + 1]
    return rest.split("\n", 1)[0]


def _read_moves(segment: str) -> Actions | None:
    actions: list[str] = []
    for match in _TOKEN.finditer(segment):
        token = match.group()
        action = _ACTION_WORDS.get(token.lower())
        if action is not None:
            actions.append(action)
        elif token.isupper() and set(token) <= set(MOVES):
            actions.extend(token)
        elif token.lower() not in FILLER_WORDS:
            return None
        if len(actions) > MAX_ACTIONS:
            return None
    return tuple(actions) or None


def bfs_distances(
    height: int, width: int, source: Cell, passable: Callable[[Cell], bool]
) -> tuple[tuple[int, ...], ...]:
    """Steps from `source` to every cell over passable cells (4-neighbour moves); -1 where unreachable."""
    distance = [[-1] * width for _ in range(height)]
    distance[source[0]][source[1]] = 0
    frontier = deque([source])
    while frontier:
        cell = frontier.popleft()
        for action in MOVES:
            row, col = shift(cell, action)
            if 0 <= row < height and 0 <= col < width and distance[row][col] < 0 and passable((row, col)):
                distance[row][col] = distance[cell[0]][cell[1]] + 1
                frontier.append((row, col))
    return tuple(tuple(row) for row in distance)


def parse_grid_text(text: str) -> Iterator[tuple[Cell, str]]:
    """Every (cell, character) of a board written one row per line (blank lines ignored)."""
    rows = [line.strip() for line in text.strip().splitlines() if line.strip()]
    for row, line in enumerate(rows):
        for col, char in enumerate(line):
            yield (row, col), char


P = TypeVar("P")


@dataclass(frozen=True)
class IllegalMove:
    """Why a move cannot be made, e.g. "walks into a wall"."""

    reason: str


@dataclass(frozen=True)
class Simulation(Generic[P]):
    """Where an action list leads from a position.

    Attributes:
        actions: the parsed list.
        end: the position after the applied moves.
        applied: how many moves were applied before the list ended or stopped.
        illegal: why it stopped at an illegal move (that move is not applied), else None.
        solved: it stopped because the puzzle was solved.
        deadlocked: it stopped because the puzzle became unsolvable.
    """

    actions: Actions
    end: P
    applied: int
    illegal: str | None = None
    solved: bool = False
    deadlocked: bool = False

    def summary(self) -> str:
        moves = " ".join(self.actions)
        if self.solved:
            return f"{moves} -> solves the puzzle after {self.applied} move(s)"
        if self.deadlocked:
            return f"{moves} -> after {self.applied} move(s) the puzzle can no longer be solved (deadlock)"
        if self.illegal:
            return f"{moves} -> stops at move {self.applied + 1} ({self.actions[self.applied]}), which {self.illegal}"
        return f"{moves} -> all {self.applied} move(s) applied; the puzzle is not solved yet"

    def info(self) -> dict[str, object]:
        return {
            "actions": " ".join(self.actions),
            "applied": self.applied,
            "illegal": self.illegal,
            "solved": self.solved,
            "deadlocked": self.deadlocked,
        }


@dataclass(frozen=True)
class GridConfig(ToolPlanConfig):
    """The protocol's options and the grid puzzles' reward option; puzzle configs add board options."""

    progress_reward: ProgressReward = "fraction"  # the local progress term (module docstring table)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.progress_reward not in ("fraction", "pace"):
            raise ValueError(f"progress_reward must be 'fraction' or 'pace', got {self.progress_reward!r}")


class GridBoard(Protocol[P]):
    """What the shared turn logic needs of an immutable puzzle board."""

    @property
    def start(self) -> P: ...


@dataclass(frozen=True, kw_only=True)
class GridState(EpisodeState, Generic[P]):
    """A grid puzzle's episode state.

    Attributes:
        position: the puzzle position (Plan-Path: the agent's cell; Sokoban: player and boxes).
        proposal: the tool agent's latest proposal as the plan agent sees it.
        last_commit: what the previous turn's plan move did, as both agents see it.
    """

    position: P
    proposal: str | None = None
    last_commit: str | None = None


C = TypeVar("C", bound=GridConfig)
BoardT = TypeVar("BoardT", bound=GridBoard)


class GridPuzzleEnv(ToolPlanEnv[C, BoardT, GridState[P], Actions], Generic[C, BoardT, P]):
    """The grid puzzles' rules of play (moves, simulation, rewards, prompts) over the abstract board hooks below."""

    #: the puzzle's rules in natural language, shared by both roles' system prompts
    rules: str = ""
    #: the characters of a rendered board, explained
    legend: str = ""
    answer_noun = "action list"

    # --- puzzle hooks -------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def move(self, position: P, action: str) -> P | IllegalMove:
        """The position after one move, or why the move is illegal."""

    @abc.abstractmethod
    def distance(self, position: P) -> int | None:
        """Optimal number of moves from `position` to a solution; None if there is none (deadlock)."""

    @abc.abstractmethod
    def render(self, position: P) -> str:
        """The board with `position` as text, one line per row (also the code tool's stdin)."""

    @abc.abstractmethod
    def describe_position(self, position: P) -> str:
        """A sentence locating the pieces, with (row, column) coordinates."""

    # --- ToolPlanEnv --------------------------------------------------------------------------------------------

    def start(self, board: BoardT) -> GridState[P]:
        if not self.distance(board.start):
            raise ValueError(f"{self.name}: the board's start is already solved or cannot be solved")
        return GridState(position=board.start)

    def read_answer(self, text: str) -> Actions | Unreadable:
        actions = parse_actions(text)
        return Unreadable("no action list found") if actions is None else actions

    def program_input(self) -> str:
        return self.render(self.state.position) + "\n"

    def expert_answer(self) -> str:
        return "Actions: " + " ".join(self.optimal_actions(self.state.position))

    def propose(self, answer: Actions | Unreadable) -> tuple[GridState[P], Move]:
        state = self.state
        if isinstance(answer, Unreadable):
            proposal = f"The tool agent's reply gave no usable action list: {answer.reason}."
            return replace(state, proposal=proposal), Move.rejected(answer.reason)
        simulation = self.simulate(state.position, answer)
        proposal = (
            f"The tool agent proposed: {simulation.summary()}.\n"
            f"Board after the proposed moves:\n{self.render(simulation.end)}"
        )
        local = self.move_reward(state.position, simulation, self.config.max_turns - state.turn)
        return replace(state, proposal=proposal), Move(local, simulation.illegal is None, simulation.info())

    def commit(self, answer: Actions | Unreadable) -> tuple[GridState[P], Move]:
        state = self.state
        if isinstance(answer, Unreadable):
            last_commit = "The plan agent's reply gave no usable action list; nothing moved."
            return replace(state, proposal=None, last_commit=last_commit), Move.rejected(answer.reason)
        simulation = self.simulate(state.position, answer)
        outcome = "solved" if simulation.solved else "deadlocked" if simulation.deadlocked else "playing"
        local = self.move_reward(state.position, simulation, self.config.max_turns - state.turn)
        committed = replace(
            state,
            position=simulation.end,
            proposal=None,
            last_commit=f"The plan agent moved: {simulation.summary()}.",
        )
        return committed, Move(local, simulation.illegal is None, simulation.info(), outcome)

    def team_reward(self) -> float:
        state = self.state
        if state.outcome == "solved":
            return 1.0
        if state.outcome == "deadlocked":
            return -1.0
        start_distance = self.distance(self.board.start)
        return _clip((start_distance - self.distance(state.position)) / start_distance)

    # --- rules of play ------------------------------------------------------------------------------------------

    def simulate(self, position: P, actions: Actions) -> Simulation[P]:
        """Apply `actions` from `position` without committing them (see `Simulation` for where it stops)."""
        for index, action in enumerate(actions):
            moved = self.move(position, action)
            if isinstance(moved, IllegalMove):
                return Simulation(actions, position, index, illegal=moved.reason)
            position = moved
            distance = self.distance(position)
            if distance == 0:
                return Simulation(actions, position, index + 1, solved=True)
            if distance is None:
                return Simulation(actions, position, index + 1, deadlocked=True)
        return Simulation(actions, position, len(actions))

    def optimal_actions(self, position: P) -> list[str]:
        """A shortest action list from `position` to a solution (empty if solved or deadlocked)."""
        actions: list[str] = []
        remaining = self.distance(position)
        while remaining:
            for action in MOVES:
                moved = self.move(position, action)
                if not isinstance(moved, IllegalMove) and self.distance(moved) == remaining - 1:
                    actions.append(action)
                    position, remaining = moved, remaining - 1
                    break
        return actions

    def move_reward(self, before: P, simulation: Simulation[P], turns_left: int) -> float:
        """The local reward of an action list that was read, simulated from `before` with `turns_left` turns to go
        (this one included), as in the module docstring's table."""
        distance_before = self.distance(before)
        if simulation.solved:
            return 0.5 + 0.5 * min(1.0, distance_before / simulation.applied)
        if simulation.deadlocked:
            return DEADLOCK_MOVE_REWARD
        needed = distance_before
        if self.config.progress_reward == "pace":
            needed = math.ceil(distance_before / turns_left)
        progress = 0.5 * _clip((distance_before - self.distance(simulation.end)) / needed)
        return progress - (ILLEGAL_MOVE_PENALTY if simulation.illegal else 0.0)

    # --- prompts ------------------------------------------------------------------------------------------------

    def full_system_prompt(self, role: str) -> str:
        team = "You are the {} agent of a two-agent team (a tool agent and a plan agent) solving a grid puzzle.\n"
        moves = (
            "Write moves as the letters U (up), D (down), L (left), R (right) separated by spaces; "
            "moves are applied in order, and an illegal move stops the list there."
        )
        if self.config.single_agent:
            return (
                "You are an agent solving a grid puzzle on your own.\n"
                f"{self.rules}\n{moves}\n"
                "Think briefly, then end your reply with one line giving your moves, e.g. `Actions: U R R D`."
            )
        if role == "plan":
            return (
                team.format("plan") + f"{self.rules}\n{moves}\n"
                "Each turn the tool agent first proposes moves and the environment shows you where they lead. "
                "You decide the moves that are actually made: they may follow the proposal, fix it, or replace it. "
                "Think briefly, then end your reply with one line giving your moves, e.g. `Actions: U R R D`."
            )
        if self.config.tool_mode == "code":
            task = (
                "Write a Python program in one ```python code block. It receives the board on standard input, "
                "exactly as shown to you (one line per row, same characters), and must print the action list "
                "that solves the puzzle, e.g. `U R R D`. The environment runs it and shows the plan agent where "
                # Of the grid prompts only this one states the read limit: a program is the one answer that can be
                # long, and the others already ask for the moves at the end of the reply, which is what is read.
                f"the printed moves lead; the plan agent decides the moves that are actually made. {READ_LIMIT_NOTE}"
            )
        else:
            task = (
                "Propose the moves that solve the puzzle: reply with one line, e.g. `Actions: U R R D`. "
                "The environment shows the plan agent where your moves lead; the plan agent decides the moves "
                "that are actually made."
            )
        return team.format("tool") + f"{self.rules}\n{moves}\n{task}"

    def user_prompt(self, role: str) -> str:
        state = self.state
        turn = min(state.turn + 1, self.config.max_turns)
        parts = [
            f"Turn {turn} of {self.config.max_turns}.",
            f"Board (row 0 at the top, column 0 at the left):\n{self.render(state.position)}",
            f"Legend: {self.legend}",
            self.describe_position(state.position),
        ]
        if self.config.brief_prompts:
            parts = [parts[0], f"Board:\n{self.render(state.position)}", parts[3]]
        if state.last_commit:
            parts.append(f"Last turn: {state.last_commit}")
        if self.config.single_agent:
            parts.append("Give your moves.")
        elif role == "plan":
            parts.append(state.proposal or "The tool agent has made no proposal this turn.")
            parts.append("Give your moves.")
        else:
            parts.append("Write your program." if self.config.tool_mode == "code" else "Give your proposed moves.")
        return "\n".join(parts)


def _clip(value: float) -> float:
    return max(-1.0, min(1.0, value))
