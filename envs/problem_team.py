"""The shape math and code share: a team acting in parallel on one problem per episode, with an immutable state.

A subclass names its roles and the single agent's, builds its config from the constructor's options (`config_of`),
and supplies the problem of a task, a fresh state, the prompts and `step`. Here: the config a task's options override,
the workflow, reset/load, a clone that shares the (immutable) problem and state, `done` from the state's outcome, and
the observation as a system and a user message (with `worked_example`, the example's two between them). Every step
may block (programs in the sandbox, grading workers).
"""

from __future__ import annotations

import abc
import functools
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

from verl_mas.env import Message, MultiAgentEnv, Task, Workflow, split_of
from verl_mas_envs.common import config_with
from verl_mas_envs.worked_example import worked_example


class TeamConfig(Protocol):
    max_turns: int
    single_agent: bool
    worked_example: bool


class TeamState(Protocol):
    """What `ProblemTeamEnv` reads of a subclass's episode state: its outcome (`done`)."""

    outcome: str


FileSplit = Literal["hash", "all"]
FILE_SPLITS: tuple[FileSplit, ...] = ("hash", "all")
ConfigT = TypeVar("ConfigT", bound=TeamConfig)
ProblemT = TypeVar("ProblemT")
StateT = TypeVar("StateT", bound=TeamState)


class ProblemTeamEnv(MultiAgentEnv, Generic[ConfigT, ProblemT, StateT]):
    """A parallel team on one problem per episode (see the module docstring)."""

    label: ClassVar[str]  # the environment's name in error messages
    team_roles: ClassVar[tuple[str, ...]]
    single_agent_roles: ClassVar[tuple[str, ...]]

    def __init__(self, config: ConfigT) -> None:
        self.base_config = config
        self.config = config
        self._problem: ProblemT | None = None
        self._state: StateT | None = None

    @abc.abstractmethod
    def _task_problem(self, config: ConfigT, seed: int, split: str) -> ProblemT:
        """The problem of a task's (seed, split) under `config`."""

    @abc.abstractmethod
    def _new_state(self) -> StateT:
        """The state an episode starts in."""

    @abc.abstractmethod
    def _system_prompt(self, role: str) -> str: ...

    @abc.abstractmethod
    def _user(self, role: str) -> str: ...

    @property
    def blocking_step(self) -> bool:
        return True

    @property
    def roles(self) -> tuple[str, ...]:
        return self.single_agent_roles if self.config.single_agent else self.team_roles

    def workflow(self) -> Workflow:
        return Workflow(roles=self.roles, mode="parallel", max_turns=self.config.max_turns)

    def reset(self, task: Task) -> None:
        try:
            self.config = config_with(self.base_config, task.options)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bad {self.label} options in task {task.uid!r}: {exc}") from exc
        self.load(self._task_problem(self.config, task.seed, task.split))

    def load(self, problem: ProblemT) -> None:
        """Start an episode on `problem` (reset does this with the task's; tests with a hand-written one)."""
        self._problem = problem
        self._state = self._new_state()

    def clone(self) -> Any:
        twin = object.__new__(type(self))
        twin.base_config, twin.config = self.base_config, self.config
        twin._problem, twin._state = self._problem, self._state
        return twin

    @property
    def done(self) -> bool:
        return self.state.outcome != "playing"

    def observe(self, role: str) -> list[Message]:
        self._check_role(role)
        example = self._worked_example(role) if self.config.worked_example else ()
        return [
            {"role": "system", "content": self._system_prompt(role)},
            *example,
            {"role": "user", "content": self._user(role)},
        ]

    def _worked_example(self, role: str) -> tuple[Message, Message]:
        """`role`'s first turn on the example problem (the team acts in parallel: no role answers before it)."""

        def start(example: ProblemTeamEnv, seed: int) -> None:
            example.load(example._task_problem(example.config, seed, "train"))

        return worked_example(self, role, self._example_config(), start)

    def _example_config(self) -> ConfigT:
        """The config the worked example's problem is drawn under: the env's, less what only one task has."""
        return self.config

    def _check_worked_example(self) -> None:
        """With `worked_example`, each role's example built now: one that cannot be is an error at construction."""
        for role in self.roles if self.config.worked_example else ():
            self._worked_example(role)

    @property
    def problem(self) -> ProblemT:
        if self._problem is None:
            raise RuntimeError(f"{self.label}: call reset(task) or load(problem) first")
        return self._problem

    @property
    def state(self) -> StateT:
        if self._state is None:
            raise RuntimeError(f"{self.label}: call reset(task) or load(problem) first")
        return self._state

    def _check_role(self, role: str) -> None:
        if role not in self.roles:
            raise ValueError(f"{self.label}: unknown role {role!r}; roles are {self.roles}")


def by_split(problems: Sequence[ProblemT], key: Callable[[ProblemT], str]) -> dict[str, tuple[ProblemT, ...]]:
    """`problems` by the split of `key(problem)` (a stable hash): no problem is in both."""
    splits = [split_of(key(problem)) for problem in problems]
    return {split: tuple(p for p, s in zip(problems, splits, strict=True) if s == split) for split in ("train", "eval")}


def file_by_split(
    path: str,
    form: str,
    load: Callable[[str, str], Sequence[Any]],
    key: Callable[[Any], str],
    label: str,
    file_split: FileSplit = "hash",
) -> dict[str, tuple[Any, ...]]:
    """The problems `load(path, form)` reads, by split; read once per process while the file is unchanged.

    `file_split="hash"` divides the file by `key` (train and eval never share a problem); "all" puts every problem in
    both splits, for a file that is one split already (a benchmark to evaluate on, a set to train on).
    """
    if file_split not in FILE_SPLITS:
        raise ValueError(f"file_split must be one of {FILE_SPLITS}, got {file_split!r}")
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise ValueError(f"{label} data_file {path!r}: {exc.strerror}") from exc
    problems = _file_by_split(os.path.realpath(path), stat.st_mtime_ns, stat.st_size, form, load, key)
    if file_split == "all":
        every = problems["train"] + problems["eval"]
        return {"train": every, "eval": every}
    return problems


@functools.lru_cache(maxsize=8)
def _file_by_split(path: str, mtime_ns: int, size: int, form: str, load, key) -> dict[str, tuple[Any, ...]]:
    return by_split(load(path, form), key)


def pick(problems: Sequence[ProblemT], seed: int, where: str, split: str) -> ProblemT:
    """The problem a task seed picks among its split's."""
    if not problems:
        raise ValueError(f"{where}: none of its problems falls in the {split} split")
    return problems[seed % len(problems)]
