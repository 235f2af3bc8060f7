"""Replies as SmolLM2-135M-Instruct writes them, through every environment (no model is loaded here).

- Its own zero-shot replies (tests/data/smollm2_zero_shot_replies.jsonl, made by tests/data/make_smollm2_replies.py):
  each episode is replayed step by step from its task; every step is a scored move, never an exception, and scores
  what it scored when recorded, so a parser change that alters how a real reply is read shows here. A reply with
  no readable move (no action list, grid, box, code block or test case) is an invalid move: `StepResult.valid` is
  False, which `verl_mas.metrics` counts in `invalid_move_share`, and its local reward is the invalid-output one.
- The environments' expert replies written the way this chat model writes (a lead-in sentence, markdown bold, a
  trailing explanation, extra blank lines, a fenced block after "Here is the program:"): each reads as the bare
  expert reply does and scores the same full credit.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from verl_mas.dataset import split_tasks
from verl_mas.env import INFRA_FAILURE, MultiAgentEnv, StepResult, make_env
from verl_mas.env.replies import extract_python, last_tagged
from verl_mas_envs.code.tester_reply import read_tester_reply
from verl_mas_envs.common import INVALID_OUTPUT_REWARD
from verl_mas_envs.math.grading import final_answer
from verl_mas_envs.puzzles.grid import parse_actions
from verl_mas_envs.puzzles.sudoku_grid import parse_grid, render_grid

DATA = Path(__file__).resolve().parents[1] / "data" / "smollm2_zero_shot_replies.jsonl"
RECORDS = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
PUZZLES = ("plan_path", "sokoban", "sudoku")
ENVS = (*PUZZLES, "math", "code")
SCORES = ("team_reward", "local_reward", "valid", "done")


def options_key(options: dict) -> str:
    return json.dumps(options, sort_keys=True)


def episodes() -> dict[tuple, list[dict]]:
    """The recorded steps of each episode, in the order they were played."""
    by_episode: dict[tuple, list[dict]] = defaultdict(list)
    for record in RECORDS:
        key = (record["env"], options_key(record["options"]), record["split"], record["seed"], record["task"])
        by_episode[key].append(record)
    return {key: sorted(steps, key=lambda record: record["step"]) for key, steps in by_episode.items()}


EPISODES = episodes()


def started(env_name: str, options: dict, split: str = "train", seed: int = 0, task: int = 0) -> MultiAgentEnv:
    """A fresh episode on the task the data generator played: task `task` of `split_tasks(env, split, .., seed)`."""
    env = make_env(env_name, **options)
    env.reset(split_tasks(env_name, split, 1, seed, options, start=task)[0])
    return env


def reason(error: str | None) -> str | None:
    """Why a move was invalid, without the details after the first colon (a program's stderr, Python's wording)."""
    return None if error is None else error.split(":", 1)[0]


def readable(env: MultiAgentEnv, role: str, reply: str) -> bool:
    """Whether `reply` holds a move `env` can read at all (before it is applied, or run as a program)."""
    name, config = env.name, env.config
    if name in PUZZLES:
        if role == "tool" and config.tool_mode == "code":
            return extract_python(reply) is not None
        if name == "sudoku":
            return parse_grid(reply, env.board.size).grid is not None
        return parse_actions(reply) is not None
    if name == "math":
        return (final_answer(reply) if role == "reasoner" else extract_python(reply)) is not None
    if role == "coder":
        return extract_python(reply) is not None
    return bool(read_tester_reply(reply, env.problem, config.max_tester_cases).cases)


# --- the model's own zero-shot replies ---------------------------------------------------------------------------


def test_the_sample_covers_every_environment_role_and_variant_and_stays_small() -> None:
    assert DATA.stat().st_size < 200_000
    assert {record["env"] for record in RECORDS} == set(ENVS)
    for (env_name, options, split, seed, task), steps in EPISODES.items():
        roles = started(env_name, json.loads(options), split, seed, task).workflow().roles
        assert [record["role"] for record in steps] == list(roles), (env_name, options, task)
    tasks = defaultdict(set)
    for record in RECORDS:
        tasks[record["env"], options_key(record["options"]), record["role"]].add(record["task"])
    assert all(len(played) == 3 for played in tasks.values())
    for options in ({}, {"tool_mode": "compact"}, {"brief_prompts": True}, {"single_agent": True}):
        assert all(any(r["env"] == name and r["options"] == options for r in RECORDS) for name in PUZZLES), options


@pytest.mark.sandbox
@pytest.mark.parametrize("key", sorted(EPISODES), ids=lambda key: f"{key[0]}-{key[1]}-{key[4]}")
def test_a_recorded_reply_replays_to_its_recorded_score(key: tuple) -> None:
    env_name, options, split, seed, task = key
    env = started(env_name, json.loads(options), split, seed, task)
    for record in EPISODES[key]:
        role, reply = record["role"], record["reply"]
        assert not env.done
        unreadable = not readable(env, role, reply)
        result = env.step(role, reply)
        assert isinstance(result, StepResult)
        assert all(math.isfinite(r) and -1.0 <= r <= 1.0 for r in (result.team_reward, result.local_reward))
        assert INFRA_FAILURE not in result.info, result.info  # the sandbox ran: every move here is the model's own
        assert {name: getattr(result, name) for name in SCORES} == {name: record[name] for name in SCORES}, reply
        assert reason(result.info.get("error")) == reason(record["error"]), reply
        if unreadable:  # counted in invalid_move_share, with the invalid-output reward
            assert result.valid is False and result.local_reward == INVALID_OUTPUT_REWARD, (role, reply)
            assert result.info.get("error")


def test_the_untrained_model_writes_mostly_invalid_moves_in_every_environment() -> None:
    """What the invalid-move share starts from when training begins from this model."""
    for env_name in ENVS:
        records = [record for record in RECORDS if record["env"] == env_name]
        assert sum(not record["valid"] for record in records) >= len(records) / 2, env_name


# --- expert replies as the model writes them ---------------------------------------------------------------------

Style = Callable[[str], str]


def _answer_rows(expert: str) -> str:
    inside = last_tagged(expert, "answer")
    assert inside is not None
    return inside.strip("\n") + "\n"


def _boxed_rows(expert: str) -> str:
    grid = parse_grid(expert, len(_answer_rows(expert).splitlines())).grid
    assert grid is not None
    return render_grid(grid)


STYLES: dict[str, dict[str, Style]] = {
    "moves": {
        "lead_in_and_explanation": lambda e: (
            f"Sure! Here are the moves:\n\n{e}\n\nThis moves the agent along the shortest route to the goal."
        ),
        "bold_marker": lambda e: (
            "To solve the puzzle, I follow the free cells one by one.\n\n"
            + e.replace("Actions:", "**Actions:**")
            + "\n\nI hope this helps!"
        ),
        "bold_word_colon_outside": lambda e: (
            "Here are the proposed moves:\n\n" + e.replace("Actions:", "**Actions**:") + "\n"
        ),
        "backticks_and_blank_lines": lambda e: f"\n\nThe moves are below.\n\n\n`{e}`\n\n\n",
        "numbered_steps_then_moves": lambda e: (
            "### Step-by-step\n\n1. Look at the board.\n2. Find the shortest route, one cell at a time.\n\n"
            f"First, I'll show you my moves.\n{e}\n"
        ),
    },
    "grid": {
        "lead_in_and_explanation": lambda e: (
            f"Sure! Here is the solved grid:\n\n{e}\n\nEvery row, column and box now holds each digit once."
        ),
        "fenced_grid": lambda e: f"Here is the solution:\n\n```\n{_answer_rows(e)}```\n\nI hope this helps!",
        "bold_heading_boxed_rows": lambda e: f"**Solution:**\n\n{_boxed_rows(e)}\n\nAll the given cells are kept.\n",
    },
    "program": {
        "lead_in_and_explanation": lambda e: (
            f"Here is the program:\n\n{e}\n\nThe program reads its input, works out the answer and prints it."
        ),
        "bold_headings_and_blank_lines": lambda e: (
            f"Sure! Here's a Python solution.\n\n**Solution:**\n\n\n{e}\n\n\n**Explanation:**\n\n"
            "1. It reads the input.\n2. It prints the result.\n"
        ),
        "capitalised_fence": lambda e: "Yes! This works:\n\n" + e.replace("```python", "```Python", 1),
        "program_then_its_output": lambda e: (
            f"Here's a sample of a Python code that produces the desired output:\n\n{e}\n\nOutput:\n\n```\n42\n```\n"
        ),
    },
    "boxed": {
        "reasoning_then_box": lambda e: (
            "Let's solve this step by step.\n\n1. Read the problem.\n2. Work out the value.\n\n"
            f"The final answer is {e}."
        ),
        "bold_final_answer_in_math_mode": lambda e: f"To find the answer, I compute it.\n\n**Final Answer:** ${e}$",
        "display_math": lambda e: f"So we have:\n\n\\[\n{e}\n\\]\n\nI hope it helps!",
        "echoed_instruction_then_box": lambda e: (
            "To solve and give your final answer as the last \\boxed{...}, here's the step-by-step process:\n\n"
            f"1. Work out the expression.\n\n2. Simplify it.\n\nSo the answer is {e}"
        ),
    },
    "cases": {
        "lead_in_and_explanation": lambda e: f"Here are some test cases:\n\n{e}\n\nThese check the task's examples.",
        "bold_case_headings": lambda e: (
            "Sure! Here are the test cases:\n\n" + re.sub(r"```input", "**Test case:**\n\n```input", e) + "\n"
        ),
    },
}

EXPERT_VARIANTS = {
    **{name: ({}, {"tool_mode": "compact"}, {"single_agent": True}) for name in PUZZLES},
    "math": ({}, {"single_agent": True}),
    "code": ({}, {"source": "humaneval"}),
}


def answer_kind(env_name: str, options: dict, role: str) -> str:
    if env_name in PUZZLES:
        if role == "tool" and options.get("tool_mode", "code") == "code":
            return "program"
        return "grid" if env_name == "sudoku" else "moves"
    if env_name == "math":
        return "boxed" if role == "reasoner" else "program"
    return "program" if role == "coder" else "cases"


def roles_of(env_name: str, options: dict) -> tuple[str, ...]:
    if options.get("single_agent"):
        return {"math": ("reasoner",), "code": ("coder",)}.get(env_name, ("plan",))
    return {"math": ("reasoner", "tool"), "code": ("coder", "tester")}.get(env_name, ("tool", "plan"))


def expert_cases() -> list[tuple[str, str, str, str]]:
    return [
        (env_name, options_key(options), role, style)
        for env_name, variants in EXPERT_VARIANTS.items()
        for options in variants
        for role in roles_of(env_name, options)
        for style in STYLES[answer_kind(env_name, options, role)]
    ]


@functools.cache
def before_move(env_name: str, options: str, role: str) -> MultiAgentEnv:
    """Task 0 of the recorded data, at `role`'s first move (the plan agent after the tool's expert proposal)."""
    env = started(env_name, json.loads(options))
    assert env.workflow().roles == roles_of(env_name, json.loads(options))
    if env.workflow().mode == "sequential":
        for earlier in env.workflow().roles[: env.workflow().roles.index(role)]:
            env.step(earlier, env.expert(earlier))
    return env


def expert_reply(env: MultiAgentEnv, role: str) -> str:
    """The env's expert reply; for a tester of a task with no examples (HumanEval), two hidden cases as asserts."""
    expert = env.expert(role)
    if expert is None and role == "tester":
        problem = env.problem
        asserts = [f"assert {problem.fn_name}({case.args}) == {case.expected}" for case in problem.hidden[:2]]
        expert = "```python\n" + "\n".join(asserts) + "\n```"
    assert expert is not None
    return expert


@functools.cache
def bare_expert(env_name: str, options: str, role: str) -> tuple[str, StepResult]:
    env = before_move(env_name, options, role)
    expert = expert_reply(env, role)
    return expert, env.clone().step(role, expert)


@pytest.mark.sandbox
@pytest.mark.parametrize(("env_name", "options", "role", "style"), expert_cases())
def test_an_expert_reply_in_the_models_style_scores_full_credit(
    env_name: str, options: str, role: str, style: str
) -> None:
    expert, bare = bare_expert(env_name, options, role)
    assert bare.valid
    if role != "tester":  # the tester's reward is the share of known-wrong programs its cases catch
        assert bare.local_reward == 1.0
    styled = STYLES[answer_kind(env_name, json.loads(options), role)][style](expert)
    assert styled != expert
    result = before_move(env_name, options, role).clone().step(role, styled)
    assert result.valid, result.info
    assert {name: getattr(result, name) for name in SCORES} == {name: getattr(bare, name) for name in SCORES}
