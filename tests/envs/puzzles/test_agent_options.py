"""Options of the built-in puzzles: single_agent (one role does the whole task), brief_prompts and worked_example."""

from __future__ import annotations

import asyncio

import pytest

from verl_mas.env import Task, make_env
from verl_mas.rollout import Generation, GenerationRequest, RolloutConfig, rollout_tasks
from verl_mas.router import PolicyRouter
from verl_mas_envs.worked_example import WORKED_EXAMPLE_SEED

OPTIONS = {
    "plan_path": {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact"},
    "sokoban": {"size": 6, "tool_mode": "compact"},
    "sudoku": {"size": 4, "tool_mode": "compact"},
}


def single(name: str):
    env = make_env(name, **OPTIONS[name], single_agent=True)
    env.reset(Task(uid=f"{name}/0", env=name, seed=3, split="train"))
    return env


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_single_agent_has_one_role_and_no_teammate_in_its_prompts(name):
    env = single(name)
    assert env.workflow().roles == ("plan",)
    prompt = " ".join(m["content"] for m in env.observe("plan"))
    assert "on your own" in prompt
    assert "tool agent" not in prompt.lower()
    with pytest.raises(ValueError, match="unknown .*role 'tool'"):
        env.observe("tool")
    team = make_env(name, **OPTIONS[name])
    assert team.workflow().roles == ("tool", "plan")


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_single_agent_expert_solves_in_one_turn(name):
    env = single(name)
    result = env.step("plan", env.expert("plan"))
    assert result.done and env.success() and result.team_reward == 1.0


def test_single_agent_rollout_samples_only_the_plan_role():
    env = make_env("plan_path", **OPTIONS["plan_path"], single_agent=True)
    router = PolicyRouter.from_spec("shared", env.workflow().roles)
    options = OPTIONS["plan_path"] | {"single_agent": True}
    tasks = [Task(uid=f"t{i}", env="plan_path", seed=i, split="train", options=options) for i in range(3)]
    requests: list[GenerationRequest] = []

    async def generate(request: GenerationRequest) -> list[Generation]:
        requests.append(request)
        return [Generation(text="Actions: U", prompt_ids=(1,), response_ids=(2,))] * request.n

    results = asyncio.run(rollout_tasks(tasks, generate, router, RolloutConfig(k=2)))
    assert {s.role for r in results for s in r.samples} == {"plan"}
    assert {r.role for r in requests} == {"plan"} and all(len(r.samples) % 2 == 0 for r in results)


@pytest.mark.parametrize("value", ["yes", 1])
def test_single_agent_must_be_a_boolean(value):
    with pytest.raises(ValueError, match="single_agent must be true or false"):
        make_env("plan_path", single_agent=value)


@pytest.mark.parametrize("name", ["plan_path", "sokoban"])
def test_brief_prompts_keep_the_board_and_positions_and_drop_the_prose(name):
    task = Task(uid=f"{name}/0", env=name, seed=3, split="train")
    full, brief = make_env(name, **OPTIONS[name]), make_env(name, **OPTIONS[name], brief_prompts=True)
    full.reset(task)
    brief.reset(task)
    for role in ("tool", "plan"):
        long_system, long_user = (m["content"] for m in full.observe(role))
        short_system, short_user = (m["content"] for m in brief.observe(role))
        assert short_system == f"You are the {role} agent."
        board = full.render(full.state.position)
        assert board in short_user and full.describe_position(full.state.position) in short_user
        assert "Legend" in long_user and "Legend" not in short_user
        assert len(short_system) + len(short_user) < (len(long_system) + len(long_user)) / 2
    brief.step("tool", brief.expert("tool"))
    assert "proposed" in brief.observe("plan")[1]["content"]  # the teammate's proposal is still shown


def test_brief_single_agent_prompt_says_alone():
    env = make_env("plan_path", **OPTIONS["plan_path"], single_agent=True, brief_prompts=True)
    env.reset(Task(uid="p", env="plan_path", seed=1, split="train"))
    assert env.observe("plan")[0]["content"] == "You solve the puzzle alone."


def test_sudoku_brief_prompts_drop_the_rules_and_keep_the_board_and_proposal():
    task = Task(uid="sudoku/0", env="sudoku", seed=5, split="train")
    full, brief = make_env("sudoku", **OPTIONS["sudoku"]), make_env("sudoku", **OPTIONS["sudoku"], brief_prompts=True)
    for env in (full, brief):
        env.reset(task)
        env.step("tool", "<answer>\n1 1 1 1\n1 1 1 1\n1 1 1 1\n1 1 1 1\n</answer>")
    for role in ("tool", "plan"):
        (long_system, long_user), (short_system, short_user) = (
            [m["content"] for m in env.observe(role)] for env in (full, brief)
        )
        assert "Sudoku rules" in long_system and short_system == f"You are the {role} agent."
        assert short_user == long_user  # the puzzle, the board and the teammate's checked proposal stay
    assert "Tool agent proposal" in brief.observe("plan")[1]["content"]
    alone = make_env("sudoku", **OPTIONS["sudoku"], single_agent=True, brief_prompts=True)
    alone.reset(task)
    assert alone.observe("plan")[0]["content"] == "You solve the Sudoku alone."
    with pytest.raises(ValueError, match="brief_prompts must be true or false"):
        make_env("sudoku", brief_prompts="no")


def test_worked_example_is_a_training_board_fixed_per_config_and_following_task_options():
    env = make_env("plan_path", **OPTIONS["plan_path"], worked_example=True)
    seen = set()
    for seed in range(4):
        env.reset(Task(uid=str(seed), env="plan_path", seed=seed, split="eval"))
        seen.add(env.observe("tool")[1]["content"])
    assert len(seen) == 1  # every task of one config shows the same example
    (example,) = seen
    board = env.generate_board(WORKED_EXAMPLE_SEED, "train")
    assert board.render(board.start) in example
    env.reset(Task(uid="big", env="plan_path", seed=0, split="eval", options={"size": 6}))
    bigger = env.observe("tool")[1]["content"]
    assert bigger != example and len(bigger.split("\n")) > len(example.split("\n"))  # the task's own size


def test_worked_example_code_tool_shows_the_expert_program_and_the_plan_what_running_it_shows():
    env = make_env("plan_path", size=4, tool_mode="code", worked_example=True)
    env.reset(Task(uid="c", env="plan_path", seed=0, split="train"))
    tool_reply = env.observe("tool")[2]["content"]
    assert tool_reply == f"```python\n{env.expert_program}```"  # the expert program, not run to show it
    # the plan's example prompt is built without the sandbox: it equals the prompt after the program really ran
    played = make_env("plan_path", size=4, tool_mode="code")
    played.load(played.generate_board(WORKED_EXAMPLE_SEED, "train"))
    played.step("tool", tool_reply)
    assert env.observe("plan")[1]["content"] == played.user_prompt("plan")
