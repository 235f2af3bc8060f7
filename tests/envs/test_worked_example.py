"""env_options.worked_example in every built-in environment: one solved first turn before the task, on a fixed
training problem, whose reply the environment itself accepts."""

from __future__ import annotations

import pytest

from verl_mas.dataset import split_tasks
from verl_mas.env import Task, make_env
from verl_mas_envs.worked_example import WORKED_EXAMPLE_SEED

SMALL = {
    "plan_path": {"size": 4, "tool_mode": "compact"},
    "sokoban": {"size": 6, "tool_mode": "compact"},
    "sudoku": {"size": 4, "tool_mode": "compact"},
    "math": {},
    "code": {},
}


def replayed(name: str, options: dict, role: str):
    """The example's episode played for real up to `role`'s first reply: reset on the example's (seed, split), and in
    a sequential team the roles before it answer with the expert's reply."""
    env = make_env(name, **options)
    env.reset(Task(uid="example", env=name, seed=WORKED_EXAMPLE_SEED, split="train"))
    workflow = env.workflow()
    if workflow.mode == "sequential":
        for before in workflow.roles[: workflow.roles.index(role)]:
            env.step(before, env.expert(before))
    return env


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("extra", [{}, {"brief_prompts": True}, {"single_agent": True}])
def test_the_example_is_one_accepted_turn_before_the_unchanged_task(name, extra):
    options = SMALL[name] | extra
    plain, shown = make_env(name, **options), make_env(name, **options, worked_example=True)
    (task,) = split_tasks(name, "eval", 1, 0, options)
    for env in (plain, shown):
        env.reset(task)
    for role in plain.workflow().roles:
        system, user = plain.observe(role)
        messages = shown.observe(role)
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
        assert messages[0] == system and messages[3] == user  # the task itself is unchanged, and asked last
        example = replayed(name, options, role)
        assert messages[1]["content"] == example.observe(role)[-1]["content"] != user  # another problem's first turn
        result = example.step(role, messages[2]["content"])
        assert result.valid and result.local_reward > 0, (name, role, result.info)  # the env takes the reply


def test_a_config_with_a_mapping_option_still_caches_its_example():
    env = make_env("math", worked_example=True, source_options={"min_terms": 2, "max_terms": 2})
    (task,) = split_tasks("math", "eval", 1, 0, {})
    env.reset(task)
    first = env.observe("reasoner")[1]
    assert env.observe("reasoner")[1] is first  # built once per config and role
    other = make_env("math", worked_example=True, source_options={"min_terms": 3, "max_terms": 3})
    other.reset(task)
    assert other.observe("reasoner")[1] != first  # another config, another example problem


@pytest.mark.parametrize("name", sorted(SMALL))
def test_worked_example_must_be_a_boolean(name):
    with pytest.raises(ValueError, match="worked_example must be true or false"):
        make_env(name, worked_example="yes")
