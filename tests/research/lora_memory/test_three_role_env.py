"""The lora_memory study's three-role environment (`research/lora_memory/three_role_env.py`) keeps every rule the
rollout relies on, and its review agent is scored against the tool's proposal."""

from __future__ import annotations

import pytest

from research.lora_memory.three_role_env import ROLES, UNREADABLE_REWARD, ReviewedPlanPath
from verl_mas.env import Task, check_env

OPTIONS = {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True}


def test_it_passes_check_env():
    report = check_env(ReviewedPlanPath, **OPTIONS)
    assert "expert_solves" in report.checked and "max_turns" in report.checked


def started(seed: int = 3) -> ReviewedPlanPath:
    env = ReviewedPlanPath(**OPTIONS)
    env.reset(Task("t", "plan_path_review", seed))
    return env


@pytest.mark.parametrize(
    ("proposal", "right"),
    [
        ("Actions: U", "yes"),  # seed 3: the goal is one row up, so U solves the board
        ("Actions: D", "no"),  # away from the goal
        ("nothing to read", "no"),  # an unreadable proposal is never worth committing
    ],
)
def test_the_review_is_right_only_with_the_proposals_verdict(proposal, right):
    env = started()
    assert env.workflow().roles == ROLES
    team = env.step("tool", proposal).team_reward
    wrong = "no" if right == "yes" else "yes"
    assert env.clone().step("review", f"Verdict: {right}").local_reward == 1.0
    judged = env.clone().step("review", f"<think>Verdict: {right}</think> Verdict: {wrong}")
    assert (judged.local_reward, judged.valid, judged.team_reward) == (0.0, True, team)
    unread = env.clone().step("review", "yes")
    assert (unread.local_reward, unread.valid, unread.done) == (UNREADABLE_REWARD, False, False)
    assert env.expert("review") == f"Verdict: {right}"


def test_the_review_sees_the_proposal_not_the_plans_instruction():
    env = started()
    env.step("tool", "Actions: U")
    system, user = env.observe("review")
    assert system["content"] == "You are the review agent."
    assert "The tool agent proposed: U" in user["content"] and "Give your moves." not in user["content"]
    assert user["content"].endswith("Verdict: no.")
