"""Every built-in environment takes its options once, into its frozen config: a bad option fails naming its key."""

from __future__ import annotations

import dataclasses

import pytest

from verl_mas.env import CheckSettings, Task, check_env, get_env_class, make_env
from verl_mas_envs.code.env import CodeConfig
from verl_mas_envs.common import config_of, config_with
from verl_mas_envs.math.env import MathConfig
from verl_mas_envs.puzzles.plan_path import PlanPathConfig
from verl_mas_envs.puzzles.sokoban import SokobanConfig
from verl_mas_envs.puzzles.sudoku import SudokuConfig

CONFIGS = {
    "code": CodeConfig,
    "math": MathConfig,
    "plan_path": PlanPathConfig,
    "sokoban": SokobanConfig,
    "sudoku": SudokuConfig,
}
SMALL = {  # cheap, playable options for check_env
    "plan_path": {"size": 5, "tool_mode": "compact"},
    "sokoban": {"size": 5, "tool_mode": "compact"},
    "sudoku": {"size": 4, "tool_mode": "compact"},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_constructor_takes_exactly_the_configs_fields(name):
    config_class = CONFIGS[name]
    defaults = config_class()
    every_option = {field.name: getattr(defaults, field.name) for field in dataclasses.fields(config_class)}
    assert make_env(name, **every_option).base_config == defaults
    assert make_env(name).base_config == defaults


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_an_unknown_option_names_itself_and_lists_the_options(name):
    listed = ", ".join(sorted(field.name for field in dataclasses.fields(CONFIGS[name])))
    with pytest.raises(ValueError) as refused:
        make_env(name, max_turns=2, colour="red")
    assert str(refused.value) == (
        f"bad options for environment {name!r}: unknown option 'colour'; the options are {listed}"
    )
    with pytest.raises(TypeError, match="unknown option 'colour'"):  # as Python refuses an unknown keyword
        get_env_class(name)(colour="red")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_tasks_unknown_option_names_itself_at_reset(name):
    env = make_env(name)
    with pytest.raises(ValueError, match=rf"^bad {name} options in task 'x': unknown option 'colour'; the options"):
        env.reset(Task("x", name, 0, "train", {"colour": "red"}))


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("sokoban", {"wall_ratio": "0.1"}, "sokoban wall_ratio must be in [0, 1), got '0.1'"),
        ("sokoban", {"max_solver_states": "many"}, "max_solver_states must be an int >= 1, got 'many'"),
        ("sokoban", {"max_solver_states": 0}, "max_solver_states must be an int >= 1, got 0"),
        ("plan_path", {"wall_ratio": None}, "plan_path wall_ratio must leave two free cells, got None"),
        ("sudoku", {"size": 4.0}, "sudoku size must be one of (4, 9), got 4.0"),
        ("math", {"source_options": 3}, "source_options must be a mapping, got 3"),
        ("math", {"source_options": [("max_terms", 2)]}, "source_options must be a mapping, got [('max_terms', 2)]"),
        ("code", {"tester_case_penalty": "1"}, "tester_case_penalty must be a finite number >= 0, got '1'"),
    ],
)
def test_an_ill_typed_option_names_its_key(name, options, message):
    with pytest.raises(ValueError) as refused:
        make_env(name, **options)
    assert str(refused.value) == message


def test_math_reads_no_source_options_as_none():
    """YAML's `source_options: null` is no options, as `mas.env_options` resolves it; a mapping is kept as a dict."""
    assert make_env("math", source_options=None).base_config.source_options == {}
    assert make_env("math", source_options={"max_terms": 2}).base_config == MathConfig(source_options={"max_terms": 2})


def test_config_with_replaces_only_the_given_options_and_checks_them():
    base = config_of(SokobanConfig, {"size": 7})
    assert config_with(base, {"boxes": 2}) == SokobanConfig(size=7, boxes=2)
    assert config_with(base, {}) == base
    with pytest.raises(TypeError, match="unknown option 'box'"):
        config_with(base, {"box": 2})
    with pytest.raises(ValueError, match="sokoban boxes"):
        config_with(base, {"boxes": 0})


@pytest.mark.parametrize("name", sorted(SMALL))
def test_check_env_builds_a_puzzle_from_its_options(name):
    assert check_env(get_env_class(name), CheckSettings(seeds=4, played_seeds=1), **SMALL[name]).checked
