"""The tool/plan protocol shared by the puzzles: options, boards per split, code-mode runs, blocking steps."""

from __future__ import annotations

import math
import time

import pytest

from verl_mas.env import Task, make_env
from verl_mas_envs.puzzles.toolplan import ToolPlanConfig

PUZZLES = ("plan_path", "sokoban", "sudoku")


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"code_time_limit_s": math.inf}, "code_time_limit_s"),
        ({"code_time_limit_s": math.nan}, "code_time_limit_s"),
        ({"code_time_limit_s": 0}, "code_time_limit_s"),
        ({"code_time_limit_s": True}, "code_time_limit_s"),
        ({"max_turns": True}, "max_turns"),
        ({"max_turns": 0}, "max_turns"),
        ({"tool_mode": "shell"}, "tool_mode"),
        ({"single_agent": "yes"}, "single_agent"),
    ],
)
def test_protocol_options_are_checked(options: dict[str, object], key: str) -> None:
    with pytest.raises(ValueError, match=key):
        ToolPlanConfig(**options)
    for name in PUZZLES:
        with pytest.raises(ValueError, match=key):
            make_env(name, **options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"size": 4}, "size must be an int >= 5"),  # passed, then every reset failed after 10,000 draws
        ({"size": 5, "boxes": 5}, r"boxes must be an int in \[1, 4\] for size 5"),
        ({"size": 5, "boxes": 4}, "no acceptable train board .* these options give no board"),
    ],
)
def test_sokoban_options_that_can_never_be_built_fail_at_construction(options: dict, message: str) -> None:
    started = time.thread_time()
    with pytest.raises(ValueError, match=message):
        make_env("sokoban", tool_mode="compact", **options)
    with pytest.raises(ValueError, match=message):  # remembered: the second try fails at once
        make_env("sokoban", tool_mode="compact", **options)
    assert time.thread_time() - started < 30  # CPU time: 10,000 draws once, then remembered


def test_smallest_buildable_sokoban_rooms_reset_in_both_splits() -> None:
    for boxes in (1, 2, 3):
        env = make_env("sokoban", tool_mode="compact", size=5, boxes=boxes, wall_ratio=0.0)
        for split in ("train", "eval"):
            env.reset(Task(uid="t", env="sokoban", seed=3, split=split))
            assert not env.done


@pytest.mark.parametrize("name", PUZZLES)
def test_code_mode_steps_are_blocking_and_the_others_are_not(name: str) -> None:
    assert make_env(name, tool_mode="code").blocking_step
    assert not make_env(name, tool_mode="compact").blocking_step
    assert not make_env(name, tool_mode="code", single_agent=True).blocking_step  # no tool role, no program


def test_task_options_decide_whether_steps_block() -> None:
    env = make_env("plan_path", tool_mode="compact")
    env.reset(Task(uid="t", env="plan_path", seed=0, options={"tool_mode": "code"}))
    assert env.blocking_step


@pytest.mark.parametrize("name", PUZZLES)
def test_a_lone_surrogate_in_a_program_is_an_invalid_move_not_an_exception(name: str) -> None:
    env = make_env(name, tool_mode="code")
    env.reset(Task(uid="t", env=name, seed=0))
    result = env.step("tool", "```python\nprint('\ud800 U')\n```")
    assert not result.valid and result.local_reward == -0.5 and "lone surrogate" in result.info["error"]
    assert "lone surrogate" in env.observe("plan")[1]["content"]


@pytest.mark.parametrize("name", PUZZLES)
def test_a_program_the_sandbox_could_not_run_is_marked_not_an_invalid_move(name: str, monkeypatch) -> None:
    from sandbox_faults import fail_sandbox_starts

    from verl_mas.env import INFRA_FAILURE

    env = make_env(name, tool_mode="code")
    env.reset(Task(uid="t", env=name, seed=0))
    failed = fail_sandbox_starts(monkeypatch, every=True)
    result = env.step("tool", "```python\nprint('U')\n```")
    assert result.valid and "Resource temporarily unavailable" in result.info[INFRA_FAILURE] and len(failed) == 2
