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


def test_one_example_per_config_whose_messages_each_caller_owns():
    env = make_env("math", worked_example=True, source_options={"min_terms": 2, "max_terms": 2})
    (first_task, second_task) = split_tasks("math", "eval", 2, 0, {})
    env.reset(first_task)
    first = env.observe("reasoner")
    first[1]["content"] = "changed by a caller"
    env.reset(second_task)  # a new config object with the same options: the same example, unchanged
    again = env.observe("reasoner")
    fresh = make_env("math", worked_example=True, source_options={"min_terms": 2, "max_terms": 2})
    fresh.reset(first_task)
    assert again[1]["content"] != "changed by a caller" and again[1:3] == fresh.observe("reasoner")[1:3]
    other = make_env("math", worked_example=True, source_options={"min_terms": 3, "max_terms": 3})
    other.reset(first_task)
    assert other.observe("reasoner")[1] != env.observe("reasoner")[1]  # another config, another example problem


def test_an_inline_problem_is_never_its_own_example():
    env = make_env("math", worked_example=True)
    shown = []
    for seed, (problem, answer) in enumerate([("What is 17*23?", "391"), ("What is 6*7?", "42")]):
        env.reset(Task(uid=f"inline{seed}", env="math", seed=seed, options={"problem": problem, "answer": answer}))
        messages = env.observe("reasoner")
        assert problem not in messages[1]["content"] and answer not in messages[2]["content"]
        assert problem in messages[3]["content"]
        shown.append(messages[1:3])
    assert shown[0] == shown[1]  # one example for the source, whatever problem a task carries inline


def test_an_example_that_cannot_be_built_fails_at_construction_naming_the_role():
    # HumanEval's problems show no examples, so the tester has no expert reply on any of them
    with pytest.raises(ValueError, match="worked_example needs an expert reply for 'tester'"):
        make_env("code", source="humaneval", worked_example=True)
    alone = make_env("code", source="humaneval", worked_example=True, single_agent=True)  # the coder's reference
    (task,) = split_tasks("code", "eval", 1, 0, {"source": "humaneval"})
    alone.reset(task)
    assert alone.observe("coder")[2]["content"].startswith("```python")


@pytest.mark.parametrize("name", ["math", "code"])
def test_a_file_split_that_shares_problems_with_evaluation_refuses_the_example(name):
    with pytest.raises(ValueError, match="file_split='all' shares with the evaluation"):
        make_env(name, worked_example=True, file_split="all")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_worked_example_must_be_a_boolean(name):
    with pytest.raises(ValueError, match="worked_example must be true or false"):
        make_env(name, worked_example="yes")
