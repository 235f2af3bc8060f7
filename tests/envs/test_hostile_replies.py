"""Adversarial replies through the built-in environments and modes: each is a scored move, never an exception.

Replies are random sequences of pieces a parser trips on (tags, fences, markers, moves, grid rows, characters that
lengthen when lowered, lone surrogates, control characters), repeated up to thousands of times. Every step must
return a StepResult with rewards in [-1, 1], within a second of CPU, leaving prompts that still encode as UTF-8.
"""

from __future__ import annotations

import functools
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verl_mas.env import MultiAgentEnv, StepResult, Task, make_env

PIECES = [
    "<think>", "</think>", "<THINK>", "<answer>", "</answer>", "```python\n", "```\n", "```", "`",
    "Actions:", "Final answer:", "moves =", "U", "R", "D", "L", "up", "left", "→", "UURD", "[", "]", "'", ",",
    "1 2 3 4\n", "3 4 1 2\n", "0", ".", "|", "-+-", "Row 1:", "9", "İ", "\ud800", "\udfff", "é", "🙂", "\u200b",
    "\n", " ", "\t", "\x00", "\x1b", "print('U R')\n", "import sys\n", "x",
    "\\boxed{", "}", "\\frac{1}{2}", "^{", "10^{10^{10}}", "\\sqrt{", "$", "print(1/3)\n", "\\left(",
]  # fmt: skip
MODES = {"compact": {"tool_mode": "compact"}, "code": {"tool_mode": "code"}, "single": {"single_agent": True}}
SIZES = {"plan_path": {"size": 5}, "sokoban": {"size": 5}, "sudoku": {"size": 4}}
replies = st.tuples(st.lists(st.sampled_from(PIECES), min_size=1, max_size=30), st.integers(1, 3_000)).map(
    lambda drawn: "".join(drawn[0]) * drawn[1]
)


@functools.cache
def started(name: str, mode: str) -> MultiAgentEnv:
    env = make_env(name, **SIZES[name], **MODES[mode])
    env.reset(Task(uid="hostile", env=name, seed=0))
    return env


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", sorted(SIZES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(reply=replies)
def test_any_reply_is_a_scored_move(name: str, mode: str, reply: str) -> None:
    env = started(name, mode)
    for role in env.workflow().roles:
        branch = env.clone()
        began = time.thread_time()
        result = branch.step(role, reply)
        assert time.thread_time() - began < 1.0  # CPU time of this thread: a program runs in a child process
        assert isinstance(result, StepResult) and isinstance(result.valid, bool)
        assert all(math.isfinite(r) and -1.0 <= r <= 1.0 for r in (result.team_reward, result.local_reward))
        for seen in env.workflow().roles:
            for message in branch.observe(seen):
                message["content"].encode()


PARALLEL_MODES = {"team": {}, "single": {"single_agent": True}, "brief": {"brief_prompts": True}}


@functools.cache
def started_parallel(name: str, mode: str) -> MultiAgentEnv:
    env = make_env(name, code_time_limit_s=1.0, grade_time_limit_s=2.0, **PARALLEL_MODES[mode])
    env.reset(Task(uid="hostile", env=name, seed=0))
    return env


@pytest.mark.parametrize("mode", sorted(PARALLEL_MODES))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(reply=replies)
def test_any_reply_to_math_is_a_scored_move(mode: str, reply: str) -> None:
    """Math grades in worker processes and runs the tool's programs in the sandbox: the thread's own CPU stays low."""
    env = started_parallel("math", mode)
    for role in env.workflow().roles:
        branch = env.clone()
        began = time.thread_time()
        result = branch.step(role, reply)
        assert time.thread_time() - began < 1.0
        assert isinstance(result, StepResult) and isinstance(result.valid, bool)
        assert all(math.isfinite(r) and -1.0 <= r <= 1.0 for r in (result.team_reward, result.local_reward))
        for seen in env.workflow().roles:
            for message in branch.observe(seen):
                message["content"].encode()
