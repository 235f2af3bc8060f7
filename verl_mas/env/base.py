"""The multi-agent environment API: roles acting in turns on a shared, cheaply clonable state."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

WorkflowMode = Literal["sequential", "parallel"]
Message = dict[str, str]


@dataclass(frozen=True)
class Workflow:
    """Turn structure of an environment.

    Attributes:
        roles: the roles in the order they act within a turn (sequential) or are applied (parallel).
        mode: "sequential": each role sees the moves its predecessors made this turn;
            "parallel": every role acts on the same state and the chosen moves are applied together.
        max_turns: episode length limit in turns.
    """

    roles: tuple[str, ...]
    mode: WorkflowMode = "sequential"
    max_turns: int = 5

    def __post_init__(self) -> None:
        if not self.roles:
            raise ValueError("Workflow.roles must name at least one role")
        if len(set(self.roles)) != len(self.roles):
            raise ValueError(f"Workflow.roles has duplicates: {self.roles}")
        if self.mode not in ("sequential", "parallel"):
            raise ValueError(f"Workflow.mode must be 'sequential' or 'parallel', got {self.mode!r}")
        if self.max_turns < 1:
            raise ValueError(f"Workflow.max_turns must be >= 1, got {self.max_turns}")


@dataclass(frozen=True)
class Task:
    """One environment instance to play: which env, which generated board, which split.

    `uid` is unique within a batch; `seed` with `split` and `options` fully determines the board.
    """

    uid: str
    env: str
    seed: int
    split: Literal["train", "eval"] = "train"
    options: dict[str, Any] = field(default_factory=dict)


INFRA_FAILURE = "infra_failure"


@dataclass(frozen=True)
class StepResult:
    """What one role's move did.

    Attributes:
        team_reward: how good the shared state is for the task after the move.
        local_reward: how good this role's own move was (includes the invalid-move penalty).
        done: the episode is over (solved, or failed beyond repair).
        valid: the move could be parsed and applied.
        info: free-form diagnostics, read by the rollout only at `INFRA_FAILURE`: why the move could not be judged
            (the sandbox or the judge failed, not the model); the sample is then left out of training.
    """

    team_reward: float
    local_reward: float
    done: bool
    valid: bool = True
    info: dict[str, Any] = field(default_factory=dict)


class MultiAgentEnv(abc.ABC):
    """A multi-agent text environment.

    Subclasses hold only task state (boards, positions, last moves), never models or chat histories,
    so that `clone` is an explicit, cheap copy. `step` must be deterministic given the state and
    the text: the rollout may replay a chosen move on a fresh clone. `verl_mas.env.check_env` checks a
    subclass against every rule the rollout relies on.
    """

    #: registry name, set by `register_env`
    name: str = ""
    #: constructor options that only choose which problems a task plays (a problem file, a generator): the rows of
    #: one run may differ in them, so a run can train on one set and evaluate on another
    problem_source_options: frozenset[str] = frozenset()
    #: the folders every process of a run reads and fills (a cache), each named by an environment variable: variable ->
    #: what the folder holds. On a Ray cluster of several nodes the verl engine checks that each is one folder for all
    shared_folder_variables: Mapping[str, str] = MappingProxyType({})

    @property
    def blocking_step(self) -> bool:
        """True when `step` may block for long (it runs model-written code): the rollout then runs every
        step of this env (the K candidates, and in parallel workflows the replay of the chosen moves) in
        worker threads instead of on the event loop."""
        return False

    @abc.abstractmethod
    def workflow(self) -> Workflow:
        """Roles, mode and max turns of this instance (may depend on constructor options)."""

    @abc.abstractmethod
    def reset(self, task: Task) -> None:
        """Build the board for `task` (deterministic in task.seed, task.split, task.options)."""

    @abc.abstractmethod
    def observe(self, role: str) -> list[Message]:
        """Chat messages (system/user) that `role` sees in the current state."""

    @abc.abstractmethod
    def step(self, role: str, text: str) -> StepResult:
        """Apply `role`'s raw model output. Malformed text is an invalid move, never an exception."""

    @abc.abstractmethod
    def clone(self) -> MultiAgentEnv:
        """An independent copy of the state: mutating the copy never changes this instance."""

    @property
    @abc.abstractmethod
    def done(self) -> bool:
        """Whether the episode has ended (success or unrecoverable failure)."""

    @abc.abstractmethod
    def success(self) -> bool:
        """The task metric: whether the current state solves the task."""

    def expert(self, role: str) -> str | None:
        """A correct move for `role` in the current state, as model output text; None if unknown."""
        return None

    def near_misses(self, role: str) -> tuple[str, ...]:
        """Plausible wrong moves for `role` in the current state, as model output text: the mistakes a model makes
        (a program one edit away from right, a case with a wrong expected output), unlike a garbled move. A warm
        start may play one in place of the expert's move (`warm_start.near_misses`), so that its data holds the
        states such mistakes lead to. Empty: none known."""
        return ()
