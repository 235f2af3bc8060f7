"""Test kit: a small deterministic counting environment and a scripted generator."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_mas.env import ENVS, MultiAgentEnv, StepResult, Task, Workflow, register_env
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.presets import apply_train_overrides
from verl_mas.rollout import Generation, GenerationRequest

INVALID_PENALTY = -1.0


class CounterEnv(MultiAgentEnv):
    """Roles add an integer in [-3, 3] to a shared counter; the team wants it to reach a target.

    team reward  = 1 - |target - value| / target       (1.0 exactly at the target)
    local reward = (|target - before| - |target - after|) / 3   (progress of this move), -1 if unparsable
    done         = value == target.  The move text "raise" makes step raise (an environment bug).
    """

    def __init__(self, mode: str = "sequential", max_turns: int = 5, roles: Sequence[str] = ("a", "b")) -> None:
        self._workflow = Workflow(roles=tuple(roles), mode=mode, max_turns=max_turns)
        self.target = 0
        self.value = 0
        self.moves = 0
        self.clone_calls = [0]  # shared across clones: counts every clone of this episode

    def workflow(self) -> Workflow:
        return self._workflow

    def reset(self, task: Task) -> None:
        self.target = random.Random(task.seed).randint(4, 9)
        self.value = 0
        self.moves = 0

    def observe(self, role: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"role={role} value={self.value} target={self.target} moves={self.moves}"}]

    def step(self, role: str, text: str) -> StepResult:
        if text.strip() == "raise":
            raise RuntimeError("counter env bug")
        try:
            delta = int(text.strip())
        except ValueError:
            return StepResult(self._team(), INVALID_PENALTY, self.done, valid=False)
        if not -3 <= delta <= 3:
            return StepResult(self._team(), INVALID_PENALTY, self.done, valid=False)
        before = abs(self.target - self.value)
        self.value += delta
        self.moves += 1
        local = (before - abs(self.target - self.value)) / 3
        return StepResult(self._team(), local, self.done)

    def _team(self) -> float:
        return 1.0 - abs(self.target - self.value) / self.target

    def clone(self) -> CounterEnv:
        other = CounterEnv.__new__(CounterEnv)
        other._workflow = self._workflow
        other.target, other.value, other.moves = self.target, self.value, self.moves
        other.clone_calls = self.clone_calls
        self.clone_calls[0] += 1
        return other

    @property
    def done(self) -> bool:
        return self.value == self.target

    def success(self) -> bool:
        return self.done

    def expert(self, role: str) -> str:
        return str(max(-3, min(3, self.target - self.value)))


class BlockingCounterEnv(CounterEnv):
    """A counter env whose steps block (as a sandbox run does), so the rollout runs them in threads: each step
    first calls `pause()`, which decides how long it holds its thread. Clones keep the same `pause`."""

    def __init__(self, pause: Callable[[], None], **options) -> None:
        super().__init__(**options)
        self.pause = pause

    @property
    def blocking_step(self) -> bool:
        return True

    def step(self, role: str, text: str) -> StepResult:
        self.pause()
        return super().step(role, text)

    def clone(self) -> BlockingCounterEnv:
        other = super().clone()
        other.__class__, other.pause = BlockingCounterEnv, self.pause
        return other


if "counter" not in ENVS:
    register_env("counter")(CounterEnv)


class SayDigitEnv(MultiAgentEnv):
    """Each role says the task's digit. Local reward -|len(reply) - 1| / 8, so random replies get different rewards
    (groups have variance and updates move the weights); solved, and done, once a role says the digit. Every move's
    info holds the reply's length, which no metric of the engine reads, so only a run callback can report it."""

    def __init__(self, max_turns: int = 2, single_agent: bool = False) -> None:
        self.roles = ("solo",) if single_agent else ("red", "blue")
        self.max_turns = max_turns
        self.digit = "0"
        self.said = False

    def workflow(self) -> Workflow:
        return Workflow(roles=self.roles, max_turns=self.max_turns)

    def reset(self, task: Task) -> None:
        self.digit = str(task.seed % 10)
        self.said = False

    def observe(self, role: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"{role}: say {self.digit}"}]

    def step(self, role: str, text: str) -> StepResult:
        self.said = self.said or text.strip() == self.digit
        reward = -abs(len(text) - 1) / 8
        return StepResult(float(self.said), reward, self.said, valid=text.strip().isdigit(), info={"chars": len(text)})

    def clone(self) -> SayDigitEnv:
        other = SayDigitEnv(self.max_turns, self.roles == ("solo",))
        other.digit, other.said = self.digit, self.said
        return other

    @property
    def done(self) -> bool:
        return self.said

    def success(self) -> bool:
        return self.said

    def expert(self, role: str) -> str:
        return self.digit


if "say_digit" not in ENVS:
    register_env("say_digit")(SayDigitEnv)


def say_digit_config(output_dir: Path, settings: Mapping[str, Any] = {}, **overrides: Any) -> LocalTrainConfig:
    """A tiny local run on `say_digit` with every size and rate set here, so that changes to the defaults do not change
    what the tests run; `settings` join the base keys, then `overrides` apply on top."""
    base = {
        "env": "say_digit",
        "k": 2,
        "tasks_per_step": 2,
        "steps": 2,
        "eval_tasks": 2,
        "eval_every": 100,
        "seed": 0,
        "output_dir": str(output_dir),
        "model": {"path": "", "hidden": 32, "layers": 1, "heads": 4, "vocab_size": 300, "max_positions": 128},
        "warm_start": {"tasks": 4, "epochs": 1, "lr": 3e-3, "batch_size": 8},
        "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 6},
        "update": {"lr": 1e-2, "temperature": 1.0},
        "progress": False,
    } | dict(settings)
    return apply_train_overrides(apply_train_overrides(LocalTrainConfig(), base), overrides)


def parse_observation(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split())


@dataclass
class ScriptedGenerator:
    """Answers each request with `script(observation fields, n, request)`; tokens are the text's bytes.

    Records every request and the peak number of requests in flight at once.
    """

    script: Callable[[dict[str, str], int, GenerationRequest], list[str]]
    yield_steps: int = 1

    def __post_init__(self) -> None:
        self.requests: list[GenerationRequest] = []
        self.in_flight = 0
        self.peak_in_flight = 0

    async def __call__(self, request: GenerationRequest) -> list[Generation]:
        self.requests.append(request)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        for _ in range(self.yield_steps):
            await asyncio.sleep(0)
        self.in_flight -= 1
        fields = parse_observation(request.messages[-1]["content"])
        prompt_ids = tuple(request.messages[-1]["content"].encode())
        texts = self.script(fields, request.n, request)
        return [
            Generation(text=t, prompt_ids=prompt_ids, response_ids=tuple(t.encode()), logprobs=tuple([-0.5] * len(t)))
            for t in texts
        ]


def spread_script(fields: dict[str, str], n: int, request: GenerationRequest) -> list[str]:
    """Candidates -1, 0, 1, 2, 3, -1, ... : distinct progress per branch."""
    return [str((i % 5) - 1) for i in range(n)]
