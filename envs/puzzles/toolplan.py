"""The tool/plan protocol shared by the built-in puzzles: a tool agent proposes, a plan agent commits, turn by turn.

Tasks. A task's board is drawn for its (seed, split) by `draw_board`, which keeps the train and eval boards of a
puzzle disjoint. A task's options override the constructor's for that episode.

Turns (sequential). The tool agent proposes an answer: in `tool_mode="compact"` it writes the answer itself; in
`tool_mode="code"` it writes a Python program in a ```python block that the sandbox runs, with `program_input()`
on stdin and `code_time_limit_s` of time, and whose printed output is read as the answer. Code-mode steps run
model-written code, so such an environment says `blocking_step` and the rollout runs its steps in worker threads,
off the event loop. The environment evaluates the proposal without committing it and shows the plan agent the
result. The plan agent then answers; its answer is committed (or rejected) and ends the turn, valid or not.
With `single_agent=True` the plan agent plays alone. The episode ends when the puzzle is solved, when it can no
longer be solved (deadlocked), or after `max_turns` plan moves.

Replies are read with `verl_mas.env.replies.answer_part` (outside reasoning, the last 20,000 characters). A reply
with no readable answer, and in code mode a reply with no program or a program that fails or prints no answer,
is an invalid move with local reward `INVALID_OUTPUT_REWARD`; its reason is shown to the plan agent.

Prompts: the rules' prose (default) or `brief_prompts` (the board and the question only); either may open with
`worked_example`, one solved first turn on a fixed training board (its prompt and the expert's reply) that a small
pretrained chat model copies the reply's form from.

A puzzle subclasses `ToolPlanEnv` with its rules: the board, how an answer is read, what a proposal and a commit
do and earn, the team reward, and the prompts.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, replace
from typing import Generic, Literal, TypeVar

from verl_mas.env import INFRA_FAILURE, Message, MultiAgentEnv, StepResult, Task, Workflow
from verl_mas.env.replies import extract_python
from verl_mas_envs.common import (
    INVALID_OUTPUT_REWARD,
    SHOWN_OUTPUT_CHARS,
    Unreadable,
    config_with,
    require_flags,
    require_ints,
    require_seconds,
    run_tool_program,
)
from verl_mas_envs.worked_example import worked_example

ToolMode = Literal["code", "compact"]
Outcome = Literal["playing", "solved", "deadlocked", "out_of_turns"]

ROLES = ("tool", "plan")
SINGLE_AGENT_ROLES = ("plan",)


@dataclass(frozen=True)
class ToolPlanConfig:
    """Options of every tool/plan puzzle; puzzle configs add their board options."""

    tool_mode: ToolMode = "code"
    max_turns: int = 5
    code_time_limit_s: float = 5.0  # wall and CPU time of one tool program in the sandbox
    single_agent: bool = False  # one agent ("plan") does the whole task: the paper's single-agent baseline
    # Prompts without the rules' prose: tiny models trained from scratch learn the rules from the warm start, and
    # a prompt a third as long makes their training three times cheaper.
    brief_prompts: bool = False
    # Before the task, one solved turn on a training board (its prompt and the expert's reply): a small pretrained
    # chat model copies a shown reply's form where it ignores a described one (untuned SmolLM2-135M, brief prompts:
    # no reply of 16 held a move line; with the example every tool reply and 10 of 16 plan replies did).
    worked_example: bool = False

    def __post_init__(self) -> None:
        require_flags(self, "single_agent", "brief_prompts", "worked_example")
        if self.tool_mode not in ("code", "compact"):
            raise ValueError(f"tool_mode must be 'code' or 'compact', got {self.tool_mode!r}")
        require_ints(self, max_turns=1)
        require_seconds(self, "code_time_limit_s")


@dataclass(frozen=True)
class Move:
    """What one role's answer did, as a puzzle scores it.

    Attributes:
        local_reward: the role's own reward for the move.
        valid: the answer was read and applies without breaking a rule.
        info: diagnostics for StepResult.info.
        outcome: a commit that solves the puzzle ("solved") or makes it unsolvable ("deadlocked") ends the episode.
    """

    local_reward: float
    valid: bool
    info: dict[str, object]
    outcome: Outcome = "playing"

    @classmethod
    def rejected(cls, reason: str) -> Move:
        """A reply with no usable answer (unreadable, or breaking a rule the puzzle rejects outright)."""
        return cls(INVALID_OUTPUT_REWARD, False, {"error": reason})


@dataclass(frozen=True, kw_only=True)
class EpisodeState:
    """The protocol's part of an episode's state; puzzles extend it. Immutable, so a clone shares it.

    Attributes:
        turn: completed turns (plan moves).
        outcome: "playing" until the episode ends.
    """

    turn: int = 0
    outcome: Outcome = "playing"


# (environment class, config) -> why no board can be built, None if one can: see ToolPlanEnv._check_buildable
_build_problems: dict[tuple[type, ToolPlanConfig], str | None] = {}

BoardT = TypeVar("BoardT")
C = TypeVar("C", bound=ToolPlanConfig)
S = TypeVar("S", bound=EpisodeState)
A = TypeVar("A")


class ToolPlanEnv(MultiAgentEnv, Generic[C, BoardT, S, A]):
    """The protocol over a puzzle given by the hooks below: config `C`, immutable board `BoardT`, state `S`,
    answer `A` (what a role writes: an action list, a grid).

    Every attribute holds an immutable value (config, board, state) that a step replaces, never mutates, so a
    clone is four references.
    """

    #: the code tool's expert: a program that reads `program_input()` on stdin and prints a correct answer
    expert_program: str = ""
    #: what an answer is called in "the program printed no {answer_noun}"
    answer_noun: str = "answer"
    #: what the task is called in the brief single-agent prompt
    puzzle_noun: str = "puzzle"

    def __init__(self, config: C) -> None:
        self.base_config = config
        self.config = config
        self._board: BoardT | None = None
        self._state: S | None = None
        self._check_buildable()
        for role in self.roles if config.worked_example else ():
            self._worked_example(role)  # an example that cannot be built is an error here, not at a task's turn

    # --- puzzle hooks -------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def generate_board(self, seed: int, split: str) -> BoardT:
        """The board for (seed, split) under `self.config` (deterministic; see `draw_board`)."""

    @abc.abstractmethod
    def start(self, board: BoardT) -> S:
        """The state an episode on `board` starts in; ValueError if the board leaves nothing to play."""

    @abc.abstractmethod
    def read_answer(self, text: str) -> A | Unreadable:
        """The answer in a reply or in a tool program's output."""

    @abc.abstractmethod
    def program_input(self) -> str:
        """The code tool program's stdin in the current state."""

    @abc.abstractmethod
    def propose(self, answer: A | Unreadable) -> tuple[S, Move]:
        """The tool's proposal: evaluated and shown to the plan agent, not committed."""

    @abc.abstractmethod
    def commit(self, answer: A | Unreadable) -> tuple[S, Move]:
        """The plan's answer applied to the state (the protocol then counts the turn)."""

    @abc.abstractmethod
    def team_reward(self) -> float:
        """How good the current state is for the task."""

    @abc.abstractmethod
    def expert_answer(self) -> str:
        """A correct typed answer in the current state, as a reply."""

    @abc.abstractmethod
    def full_system_prompt(self, role: str) -> str:
        """The system prompt with the rules' prose (`brief_prompts=False`)."""

    @abc.abstractmethod
    def user_prompt(self, role: str) -> str:
        """The user message: the current state as `role` sees it."""

    # --- MultiAgentEnv -------------------------------------------------------------------------------------------

    @property
    def blocking_step(self) -> bool:
        return self.config.tool_mode == "code" and not self.config.single_agent

    def workflow(self) -> Workflow:
        return Workflow(roles=self.roles, mode="sequential", max_turns=self.config.max_turns)

    @property
    def roles(self) -> tuple[str, ...]:
        return SINGLE_AGENT_ROLES if self.config.single_agent else ROLES

    def reset(self, task: Task) -> None:
        try:
            self.config = config_with(self.base_config, task.options)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bad {self.name} options in task {task.uid!r}: {exc}") from exc
        self.load(self.generate_board(task.seed, task.split))

    def load(self, board: BoardT) -> None:
        """Start an episode on `board` (reset does this with a generated one; tests with a hand-built one)."""
        self._board = board
        self._state = self.start(board)

    def clone(self) -> ToolPlanEnv[C, BoardT, S, A]:
        twin = object.__new__(type(self))
        twin.base_config, twin.config = self.base_config, self.config
        twin._board, twin._state = self._board, self._state
        return twin

    @property
    def done(self) -> bool:
        return self.state.outcome != "playing"

    def success(self) -> bool:
        return self.state.outcome == "solved"

    def observe(self, role: str) -> list[Message]:
        self._check_role(role)
        example = self._worked_example(role) if self.config.worked_example else ()
        return [
            {"role": "system", "content": self._system_prompt(role)},
            *example,
            {"role": "user", "content": self.user_prompt(role)},
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
        return self.expert_answer()

    # --- the protocol --------------------------------------------------------------------------------------------

    @property
    def board(self) -> BoardT:
        if self._board is None:
            raise RuntimeError(f"{self.name}: call reset(task) or load(board) first")
        return self._board

    @property
    def state(self) -> S:
        if self._state is None:
            raise RuntimeError(f"{self.name}: call reset(task) or load(board) first")
        return self._state

    def _tool_step(self, text: str) -> StepResult:
        answer = self._tool_answer(text)
        self._state, move = self.propose(answer)
        if isinstance(answer, Unreadable) and answer.infra:  # the sandbox failed, not the model: no bad move
            info = {**move.info, INFRA_FAILURE: answer.reason}
            return StepResult(self.team_reward(), move.local_reward, False, info=info)
        return StepResult(self.team_reward(), move.local_reward, False, valid=move.valid, info=move.info)

    def _tool_answer(self, text: str) -> A | Unreadable:
        if self.config.tool_mode == "compact":
            return self.read_answer(text)
        code = extract_python(text)
        if code is None:
            return Unreadable("no ```python code block")
        printed = run_tool_program(code, self.program_input(), self.config.code_time_limit_s)
        if isinstance(printed, Unreadable):
            return printed
        answer = self.read_answer(printed)
        if isinstance(answer, Unreadable):
            return Unreadable(f"the program printed no {self.answer_noun}: {printed[:SHOWN_OUTPUT_CHARS]!r}")
        return answer

    def _plan_step(self, text: str) -> StepResult:
        state, move = self.commit(self.read_answer(text))
        turn = state.turn + 1
        outcome = move.outcome
        if outcome == "playing" and turn >= self.config.max_turns:
            outcome = "out_of_turns"
        self._state = replace(state, turn=turn, outcome=outcome)
        return StepResult(self.team_reward(), move.local_reward, self.done, valid=move.valid, info=move.info)

    def _system_prompt(self, role: str) -> str:
        if not self.config.brief_prompts:
            return self.full_system_prompt(role)
        return f"You solve the {self.puzzle_noun} alone." if self.config.single_agent else f"You are the {role} agent."

    def _worked_example(self, role: str) -> tuple[Message, Message]:
        """`role`'s first turn on the example board; for the plan agent of a team, after the tool's expert proposal."""

        def start(example: ToolPlanEnv, seed: int) -> None:
            example.load(example.generate_board(seed, "train"))
            if role == "plan" and not self.config.single_agent:
                # propose, not step: in code mode a step would run the expert program in the sandbox
                example._state, _ = example.propose(example.read_answer(example.expert_answer()))

        return worked_example(self, role, self.config, start)

    def _check_buildable(self) -> None:
        """Options that pass their checks yet can never give a board (e.g. a room too small to push a box in) are
        an error here, not after `MAX_GENERATION_ATTEMPTS` draws at some later reset. Once per class and config."""
        key = (type(self), self.config)
        if key not in _build_problems:
            try:
                for split in ("train", "eval"):
                    self.generate_board(0, split)
                _build_problems[key] = None
            except (RuntimeError, ValueError) as exc:
                _build_problems[key] = str(exc)
        if _build_problems[key] is not None:
            raise ValueError(f"{_build_problems[key]}: these options give no board")

    def _check_role(self, role: str) -> None:
        if role not in self.roles:
            raise ValueError(f"{self.name}: unknown role {role!r}; roles are {self.roles}")
