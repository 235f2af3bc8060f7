"""experiments/code_tester.py's tester shares from hand-made move infos, and learning.py's tester-rule arms."""

import dataclasses
from pathlib import Path

import pytest
from script_testkit import loaded_script

from verl_mas.env import INFRA_FAILURE


@pytest.fixture(scope="module")
def code_tester():
    with loaded_script("experiments/code_tester.py", "code_tester_experiment") as module:
        yield module


def info(cases: int, degenerate: int, credited: int, caught: int, known_wrong: int, failed: int) -> dict:
    return {
        "cases": cases, "degenerate": degenerate, "credited": credited, "caught": caught, "known_wrong": known_wrong,
        "failed_by_correct": failed,
    }  # fmt: skip


def test_the_shares_of_a_rollouts_tester_moves(code_tester) -> None:
    moves = [
        (True, info(2, 0, 1, 1, 3, 1)),  # catches 1 of 3; 1 of 2 cases credited; a wrong case
        (True, info(1, 1, 1, 3, 3, 0)),  # catches all 3; 1 of 2 credited
        (False, {"error": "no usable test case", "degenerate": 2}),  # unreadable: 0 and 0, no wrong case
        (True, info(1, 0, 0, 0, 0, 0)),  # no known-wrong program: left out of the catch share only
        (True, {INFRA_FAILURE: "the sandbox failed"}),  # not judged: left out
    ]
    shares = code_tester.tester_shares(moves)
    assert shares == pytest.approx(
        {"catch_share": (1 / 3 + 1 + 0) / 3, "credited_share": (0.5 + 0.5 + 0 + 0) / 4, "wrong_case_share": 1 / 4}
    )
    assert code_tester.tester_shares([]) == {}


def test_the_rule_arms_share_the_team_warm_start_and_differ_in_the_tester_reward_only(code_tester) -> None:
    learning = code_tester.learning
    config = learning.env_config("code", ["default"], {"env_options": {"brief_examples": True}}, 3)
    runs = {
        arm: learning.method_config(config, arm, "/warm", Path("/out") / arm)
        for arm in ("at_grpo_credit_share", "at_grpo_catch_share", "at_grpo_shared")
    }
    assert runs["at_grpo_credit_share"].env_options["tester_reward"] == "credit_share"
    assert runs["at_grpo_catch_share"].env_options["tester_reward"] == "catch_share"
    assert "tester_reward" not in runs["at_grpo_shared"].env_options
    same = [dataclasses.replace(run, env_options={}, output_dir="") for run in runs.values()]
    assert same[0] == same[1] == same[2]
    assert all(run.env_options["brief_examples"] and not run.env_options["single_agent"] for run in runs.values())
    warm = learning.warm_start_run_config(config, False, Path("/warm"))  # built from the env's config, no arm's
    assert "tester_reward" not in warm.env_options
