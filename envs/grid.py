"""Shared grid geometry, action-list parsing, and the tool/plan turn logic of the grid puzzles (Plan-Path, Sokoban).

Action lists. Roles write moves as U/D/L/R letters, words (up, down, left, right) or arrows, in any case,
separated by anything: spaces, commas, quotes, brackets (a JSON list works). `parse_actions` reads, in order:
  1. the text after the last `</think>` and before any unclosed `<think>` (reasoning never counts);
  2. within that, the last <answer>...</answer> block if there is one;
  3. within that, the text after the last marker such as "Actions:", "Moves:", "Final answer:" (the rest of
     that line, or a whole [...] list that starts there); else the last [...] list; else all of it.
The chosen segment must hold only moves and the filler words in `FILLER_WORDS`: any other word, a number
("R 3"), or a foreign symbol makes the output unparsable, never guessed at. Runs of capital letters such as
"UURD" are read letter by letter. An empty list or more than `MAX_ACTIONS` moves is unparsable too.

Turns (both puzzles). The tool agent proposes an action list: in `tool_mode="code"` it writes a Python program
in a ```python block that the sandbox runs with the board on stdin and whose printed action list is the
proposal; in `tool_mode="compact"` it writes the list itself. The environment simulates the proposal on the
current board (nothing is committed) and shows the plan agent where it leads. The plan agent then commits an
action list: the moves are applied in order; an illegal move stops the list there (the moves before it stay
applied); solving the puzzle or reaching a deadlock stops it too. A plan move, parsable or not, ends the turn.
The episode is done when the puzzle is solved, a deadlock makes it unsolvable, or `max_turns` turns have passed.

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
import random
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Generic, Literal, Protocol, TypeVar

from verl_mas.env import MultiAgentEnv, StepResult, Task, Workflow, split_of

Cell = tuple[int, int]  # (row, column); row 0 is the top row
ToolMode = Literal["code", "compact"]
ProgressReward = Literal["fraction", "pace"]
Outcome = Literal["playing", "solved", "deadlocked", "out_of_turns"]

ROLES = ("tool", "plan")
SINGLE_AGENT_ROLES = ("plan",)
MOVES: dict[str, Cell] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
MAX_ACTIONS = 100
FILLER_WORDS = frozenset({"and", "then", "go", "move", "moves", "step", "steps"})
MAX_GENERATION_ATTEMPTS = 10_000  # a board lands in the eval split with probability 0.2 per attempt

INVALID_OUTPUT_REWARD = -0.5
DEADLOCK_MOVE_REWARD = -0.5
ILLEGAL_MOVE_PENALTY = 0.25
STDERR_SHOWN_CHARS = 300

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
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_MARKER = re.compile(r"\b(?:final\s+answer|answer|actions?(?:\s+list)?|moves?|path|solution)\s*[:=]", re.IGNORECASE)
_BRACKETED = re.compile(r"\[([^\[\]]*)\]")
# Words, numbers, and any single symbol that is not separator punctuation (those become unparsable tokens).
_TOKEN = re.compile(r"[A-Za-z]+|[0-9]+|[^\s\[\](){}<>,;:.'\"`*|_=-]")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def shift(cell: Cell, action: str) -> Cell:
    dr, dc = MOVES[action]
    return cell[0] + dr, cell[1] + dc


def strip_thinking(text: str) -> str:
    """The part of a reply outside reasoning: after the last `</think>`, before an unclosed `<think>`."""
    closing = text.lower().rfind("</think>")
    if closing >= 0:
        text = text[closing + len("</think>") :]
    opening = text.lower().find("<think>")
    return text if opening < 0 else text[:opening]


def parse_actions(text: str) -> tuple[str, ...] | None:
    """The action list in a reply as a tuple of U/D/L/R, or None if there is none (see the module docstring)."""
    text = strip_thinking(text)
    answers = _ANSWER.findall(text)
    if answers:
        text = answers[-1]
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


def _read_moves(segment: str) -> tuple[str, ...] | None:
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


def extract_python(text: str) -> str | None:
    """The last ```python (or untagged) fenced block of a reply, outside reasoning; None if there is none."""
    blocks = _FENCE.findall(strip_thinking(text))
    python = [code for language, code in blocks if language.lower() in ("python", "py", "python3")]
    untagged = [code for language, code in blocks if not language]
    chosen = python or untagged
    return chosen[-1] if chosen else None


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


B = TypeVar("B")
P = TypeVar("P")


def draw_board(
    name: str, seed: int, split: str, candidate: Callable[[random.Random], B | None], key: Callable[[B], str]
) -> B:
    """The first acceptable candidate board, drawn with rng seeded by (name, seed, attempt), whose split is `split`.

    `candidate` returns None for a board it rejects (unsolvable, too easy); `key` gives the canonical board text
    whose hash decides the split, so the train and eval boards of one puzzle can never overlap.
    """
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    for attempt in range(MAX_GENERATION_ATTEMPTS):
        board = candidate(random.Random(f"{name}/{seed}/{attempt}"))
        if board is not None and split_of(key(board)) == split:
            return board
    raise RuntimeError(f"{name}: no acceptable {split} board in {MAX_GENERATION_ATTEMPTS} attempts (seed {seed})")


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

    actions: tuple[str, ...]
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


@dataclass(frozen=True)
class GridConfig:
    """Options every grid puzzle shares; puzzle configs add board options. Task options override them at reset."""

    tool_mode: ToolMode = "code"
    max_turns: int = 5
    code_time_limit_s: float = 5.0  # wall and CPU time of one tool program in the sandbox
    single_agent: bool = False  # one agent ("plan") does the whole task: the paper's single-agent baseline
    # Prompts without the rules' prose: tiny models trained from scratch learn the rules from the warm start, and
    # a prompt a third as long makes their training three times cheaper.
    brief_prompts: bool = False
    progress_reward: ProgressReward = "fraction"  # the local progress term (module docstring table)

    def __post_init__(self) -> None:
        for key in ("single_agent", "brief_prompts"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{key} must be true or false, got {getattr(self, key)!r}")
        if self.tool_mode not in ("code", "compact"):
            raise ValueError(f"tool_mode must be 'code' or 'compact', got {self.tool_mode!r}")
        if self.progress_reward not in ("fraction", "pace"):
            raise ValueError(f"progress_reward must be 'fraction' or 'pace', got {self.progress_reward!r}")
        if not (isinstance(self.max_turns, int) and self.max_turns >= 1):
            raise ValueError(f"max_turns must be an int >= 1, got {self.max_turns!r}")
        if not self.code_time_limit_s > 0:
            raise ValueError(f"code_time_limit_s must be positive, got {self.code_time_limit_s!r}")


class GridBoard(Protocol[P]):
    """What the shared turn logic needs of an immutable puzzle board."""

    @property
    def start(self) -> P: ...


@dataclass(frozen=True)
class EpisodeState(Generic[P]):
    """The mutable part of an episode, as one immutable value: a clone shares it until a step replaces it.

    Attributes:
        position: the puzzle position (Plan-Path: the agent's cell; Sokoban: player and boxes).
        turn: completed turns (plan moves).
        proposal: the tool agent's latest proposal as the plan agent sees it.
        last_commit: what the previous turn's plan move did, as both agents see it.
        outcome: "playing" until the episode ends.
    """

    position: P
    turn: int = 0
    proposal: str | None = None
    last_commit: str | None = None
    outcome: Outcome = "playing"


C = TypeVar("C", bound=GridConfig)
BoardT = TypeVar("BoardT", bound=GridBoard)


class GridPuzzleEnv(MultiAgentEnv, Generic[C, BoardT, P]):
    """The tool/plan turn logic over a puzzle given by the abstract board hooks below."""

    #: the puzzle's rules in natural language, shared by both roles' system prompts
    rules: str = ""
    #: the characters of a rendered board, explained
    legend: str = ""
    #: a program that reads the rendered board on stdin and prints an optimal action list
    expert_program: str = ""

    def __init__(self, config: C) -> None:
        self.base_config = config
        self.config = config
        self._board: BoardT | None = None
        self._state: EpisodeState[P] | None = None

    # --- puzzle hooks -------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def generate_board(self, seed: int, split: str) -> BoardT:
        """The board for (seed, split) under `self.config` (deterministic)."""

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

    # --- MultiAgentEnv -------------------------------------------------------------------------------------------

    def workflow(self) -> Workflow:
        return Workflow(roles=self.roles, mode="sequential", max_turns=self.config.max_turns)

    @property
    def roles(self) -> tuple[str, ...]:
        return SINGLE_AGENT_ROLES if self.config.single_agent else ROLES

    def reset(self, task: Task) -> None:
        try:
            self.config = replace(self.base_config, **task.options)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bad {self.name} options in task {task.uid!r}: {exc}") from exc
        self.load(self.generate_board(task.seed, task.split))

    def load(self, board: BoardT) -> None:
        """Start an episode on `board` (reset does this with a generated one; tests with a hand-built one)."""
        self._board = board
        if not self.distance(board.start):
            raise ValueError(f"{self.name}: the board's start is already solved or cannot be solved")
        self._state = EpisodeState(position=board.start)

    def clone(self) -> GridPuzzleEnv[C, BoardT, P]:
        twin = object.__new__(type(self))
        # Config, board and state are immutable values: sharing them is a full copy of the state.
        twin.base_config = self.base_config
        twin.config = self.config
        twin._board = self._board
        twin._state = self._state
        return twin

    @property
    def done(self) -> bool:
        return self.state.outcome != "playing"

    def success(self) -> bool:
        return self.state.outcome == "solved"

    def observe(self, role: str) -> list[dict[str, str]]:
        self._check_role(role)
        return [
            {"role": "system", "content": self._system_prompt(role)},
            {"role": "user", "content": self._user_prompt(role)},
        ]

    def step(self, role: str, text: str) -> StepResult:
        self._check_role(role)
        if self.done:
            raise RuntimeError(f"{self.name}: step({role!r}) after the episode ended ({self.state.outcome})")
        return self._tool_step(text) if role == "tool" else self._plan_step(text)

    def expert(self, role: str) -> str | None:
        self._check_role(role)
        if self.done:
            return None
        if role == "tool" and self.config.tool_mode == "code":
            return f"```python\n{self.expert_program}```"
        return "Actions: " + " ".join(self.optimal_actions(self.state.position))

    # --- shared logic --------------------------------------------------------------------------------------------

    @property
    def board(self) -> BoardT:
        if self._board is None:
            raise RuntimeError(f"{self.name}: call reset(task) or load(board) first")
        return self._board

    @property
    def state(self) -> EpisodeState[P]:
        if self._state is None:
            raise RuntimeError(f"{self.name}: call reset(task) or load(board) first")
        return self._state

    def simulate(self, position: P, actions: tuple[str, ...]) -> Simulation[P]:
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

    def team_reward(self) -> float:
        state = self.state
        if state.outcome == "solved":
            return 1.0
        if state.outcome == "deadlocked":
            return -1.0
        start_distance = self.distance(self.board.start)
        return _clip((start_distance - self.distance(state.position)) / start_distance)

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

    def _tool_step(self, text: str) -> StepResult:
        state = self.state
        actions, failure = self._tool_actions(text)
        if actions is None:
            self._state = replace(state, proposal=f"The tool agent's reply gave no usable action list: {failure}.")
            return StepResult(self.team_reward(), INVALID_OUTPUT_REWARD, False, valid=False, info={"error": failure})
        simulation = self.simulate(state.position, actions)
        proposal = (
            f"The tool agent proposed: {simulation.summary()}.\n"
            f"Board after the proposed moves:\n{self.render(simulation.end)}"
        )
        self._state = replace(state, proposal=proposal)
        local = self.move_reward(state.position, simulation, self.config.max_turns - state.turn)
        return StepResult(self.team_reward(), local, False, valid=simulation.illegal is None, info=_info(simulation))

    def _tool_actions(self, text: str) -> tuple[tuple[str, ...] | None, str]:
        """The tool's proposed actions, or None and why there are none."""
        if self.config.tool_mode == "compact":
            return parse_actions(text), "no action list found"
        code = extract_python(text)
        if code is None:
            return None, "no ```python code block"
        from verl_mas.sandbox import SandboxLimits, run_python  # lazy: only code mode needs the sandbox

        seconds = self.config.code_time_limit_s
        limits = SandboxLimits(wall_time_s=seconds, cpu_time_s=math.ceil(seconds))
        result = run_python(code, stdin=self.render(self.state.position) + "\n", limits=limits)
        if result.timed_out:
            return None, "the program ran out of time"
        if result.memory_exceeded:
            return None, "the program ran out of memory"
        if result.exit_code != 0:
            stderr = result.stderr.strip()[-STDERR_SHOWN_CHARS:]
            return None, f"the program exited with code {result.exit_code}" + (f": {stderr}" if stderr else "")
        printed = result.stdout[:STDERR_SHOWN_CHARS]
        return parse_actions(result.stdout), f"the program printed no action list: {printed!r}"

    def _plan_step(self, text: str) -> StepResult:
        state = self.state
        turn = state.turn + 1
        out_of_turns = turn >= self.config.max_turns
        actions = parse_actions(text)
        if actions is None:
            self._state = replace(
                state,
                turn=turn,
                proposal=None,
                last_commit="The plan agent's reply gave no usable action list; nothing moved.",
                outcome="out_of_turns" if out_of_turns else "playing",
            )
            info = {"error": "no action list found"}
            return StepResult(self.team_reward(), INVALID_OUTPUT_REWARD, self.done, valid=False, info=info)
        simulation = self.simulate(state.position, actions)
        outcome: Outcome = "out_of_turns" if out_of_turns else "playing"
        if simulation.solved or simulation.deadlocked:
            outcome = "solved" if simulation.solved else "deadlocked"
        self._state = EpisodeState(
            position=simulation.end,
            turn=turn,
            last_commit=f"The plan agent moved: {simulation.summary()}.",
            outcome=outcome,
        )
        local = self.move_reward(state.position, simulation, self.config.max_turns - state.turn)
        return StepResult(
            self.team_reward(), local, self.done, valid=simulation.illegal is None, info=_info(simulation)
        )

    def _check_role(self, role: str) -> None:
        if role not in self.roles:
            raise ValueError(f"{self.name}: unknown role {role!r}; roles are {self.roles}")

    def _system_prompt(self, role: str) -> str:
        if self.config.brief_prompts:
            return "You solve the puzzle alone." if self.config.single_agent else f"You are the {role} agent."
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
                "the printed moves lead; the plan agent decides the moves that are actually made."
            )
        else:
            task = (
                "Propose the moves that solve the puzzle: reply with one line, e.g. `Actions: U R R D`. "
                "The environment shows the plan agent where your moves lead; the plan agent decides the moves "
                "that are actually made."
            )
        return team.format("tool") + f"{self.rules}\n{moves}\n{task}"

    def _user_prompt(self, role: str) -> str:
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


def _info(simulation: Simulation) -> dict[str, object]:
    return {
        "actions": " ".join(simulation.actions),
        "applied": simulation.applied,
        "illegal": simulation.illegal,
        "solved": simulation.solved,
        "deadlocked": simulation.deadlocked,
    }
