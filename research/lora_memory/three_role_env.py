"""A three-role environment for the lora_memory study, plugged in as a user's own would be: Plan-Path with a reviewer.

Each turn the tool agent proposes moves, the review agent says whether committing them would pay (`Verdict: yes` or
`Verdict: no`), and the plan agent commits its own moves, as in Plan-Path; the options are Plan-Path's. The review
is right when it says yes exactly to a readable proposal that would earn the plan a positive local reward (Plan-Path
scores a proposal by what committing it would get). Its local reward is 1 when right, 0 when wrong, -0.5 when no
verdict can be read; the team reward is the board's, as the tool's step left it.

No built-in environment has three roles; the verl engine finds this one in every process through the
`verl_mas.envs` entry point (see `lora_memory.py`, which installs it for its launches).
"""

from __future__ import annotations

import re
from typing import Any

from verl_mas.env import Message, MultiAgentEnv, StepResult, Task, Workflow, register_env
from verl_mas.env.replies import answer_part
from verl_mas_envs.puzzles.plan_path import PlanPathEnv

NAME = "plan_path_review"
REVIEW = "review"
ROLES = ("tool", REVIEW, "plan")
UNREADABLE_REWARD = -0.5
VERDICT = re.compile(r"verdict:[ \t]*(yes|no)\b", re.IGNORECASE | re.ASCII)
QUESTION = "Would committing the proposed moves bring the agent closer? Answer Verdict: yes or Verdict: no."


@register_env(NAME)
class ReviewedPlanPath(MultiAgentEnv):
    """Plan-Path's tool and plan agents with a review agent between them (sequential)."""

    def __init__(self, **options: Any) -> None:
        self.inner = PlanPathEnv(**options)
        self.verdict: bool | None = None  # the right verdict on this turn's proposal; None before the tool's step
        self.team = 0.0  # the team reward the tool's step left

    @property
    def base_config(self) -> Any:
        """Plan-Path's config: what `mas.env_options` resolve to, defaults filled in."""
        return self.inner.base_config

    def workflow(self) -> Workflow:
        return Workflow(roles=ROLES, mode="sequential", max_turns=self.inner.workflow().max_turns)

    def reset(self, task: Task) -> None:
        self.inner.reset(task)
        self.verdict, self.team = None, 0.0

    def observe(self, role: str) -> list[Message]:
        if role != REVIEW:
            return self.inner.observe(role)
        system, user = self.inner.observe("plan")  # the board and the tool's proposal, as the plan agent sees them
        shown = user["content"].rsplit("\n", 1)[0]  # less the plan's own instruction
        return [
            {"role": "system", "content": "You are the review agent."},
            {"role": "user", "content": f"{shown}\n{QUESTION}"},
        ]

    def step(self, role: str, text: str) -> StepResult:
        if role == "tool":
            result = self.inner.step(role, text)
            self.verdict, self.team = result.valid and result.local_reward > 0, result.team_reward
            return result
        if role == "plan":
            self.verdict = None
            return self.inner.step(role, text)
        if role != REVIEW:
            raise ValueError(f"{NAME}: unknown role {role!r}; roles are {ROLES}")
        found = [match.group(1).lower() for match in VERDICT.finditer(answer_part(text))]
        if not found:
            return StepResult(self.team, UNREADABLE_REWARD, False, valid=False, info={"error": "no verdict"})
        said = found[-1] == "yes"
        return StepResult(self.team, float(said == bool(self.verdict)), False, info={"verdict": said})

    def clone(self) -> ReviewedPlanPath:
        twin = object.__new__(ReviewedPlanPath)
        twin.inner, twin.verdict, twin.team = self.inner.clone(), self.verdict, self.team
        return twin

    @property
    def done(self) -> bool:
        return self.inner.done

    def success(self) -> bool:
        return self.inner.success()

    def expert(self, role: str) -> str | None:
        if role != REVIEW:
            return self.inner.expert(role)
        return None if self.done else f"Verdict: {'yes' if self.verdict else 'no'}"
