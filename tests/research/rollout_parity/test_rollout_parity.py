"""research.rollout_parity: both engines' step metrics under one set of names, and the paired comparison."""

import math

import pytest

from research.rollout_parity import rollout_parity
from verl_mas.env import Workflow, make_env

PLAN_PATH = Workflow(roles=("tool", "plan"), max_turns=3)


def local_row(plan_turn1_samples: float, roles: tuple[str, str] = ("tool", "plan")) -> dict:
    first, second = roles
    row = {}
    for role in roles:
        row |= {
            f"rollout/{role}/reward": 0.5,
            f"rollout/{role}/invalid_move_share": 0.25,
            f"rollout/{role}/zero_variance_share": 0.75,
            f"rollout/{role}/turn0/samples": 8.0,
            f"rollout/{role}/turn0/reward": 1.0 if role == first else 0.0,
        }
    row[f"rollout/{second}/turn1/samples"] = plan_turn1_samples
    row[f"rollout/{second}/turn1/reward"] = 2.0
    return row


def test_local_turn_figures_pool_the_roles_as_verl_does():
    metrics = rollout_parity.local_step_metrics(local_row(4.0), PLAN_PATH)
    assert metrics["turn_0/samples"] == 16.0 and metrics["turn_0/reward"] == pytest.approx(0.5)  # (8*1 + 8*0) / 16
    assert metrics["turn_1/samples"] == 4.0 and metrics["turn_1/reward"] == pytest.approx(2.0)  # the plan's only
    assert metrics["turn_2/samples"] == 0.0 and "turn_2/reward" not in metrics  # no task reached it
    assert metrics["plan/invalid_share"] == 0.25


def test_verl_names_map_to_the_same_figures():
    row = {f"mas/{r}/{k}": v for r in ("tool", "plan") for k, v in (("reward/mean", 0.5), ("invalid_share", 0.25))}
    row |= {f"mas/{r}/zero_variance_group_share": 0.75 for r in ("tool", "plan")}
    row |= {"mas/turn_0/samples": 16.0, "mas/turn_0/reward/mean": 0.5, "mas/turn_1/samples": 4.0}
    metrics = rollout_parity.verl_step_metrics(row, PLAN_PATH)
    local = rollout_parity.local_step_metrics(local_row(4.0), PLAN_PATH)
    assert {k: v for k, v in metrics.items() if k != "turn_1/reward"} == {
        k: v for k, v in local.items() if k != "turn_1/reward"
    }


def test_the_figures_follow_the_environments_roles_and_turns():
    code = make_env("code", max_turns=2).workflow()  # coder and tester, two turns
    metrics = rollout_parity.local_step_metrics(local_row(4.0, roles=code.roles), code)
    assert metrics["turn_0/samples"] == 16.0 and metrics["turn_1/reward"] == pytest.approx(2.0)
    assert metrics["tester/reward"] == 0.5 and "turn_2/samples" not in metrics  # no third turn in this env
    with pytest.raises(KeyError):  # a row without the workflow's roles is not silently read as zeros
        rollout_parity.local_step_metrics(local_row(4.0), code)


def test_compare_pairs_steps_and_gives_the_standard_error_of_the_differences():
    local = {1: {"m": 1.0}, 2: {"m": 2.0}, 3: {"m": 3.0}, 4: {"m": 0.0}}
    verl = {1: {"m": 1.5}, 2: {"m": 2.0}, 3: {"m": 4.0}, 5: {"m": 9.0}}  # step 4 and 5 are in one engine only
    result = rollout_parity.compare(local, verl)["m"]
    assert result["steps"] == 3
    assert result["difference"] == pytest.approx(0.5)  # 0.5, 0.0, 1.0
    assert result["se"] == pytest.approx(0.5 / math.sqrt(3))  # sd of (0.5, 0, 1) is 0.5
    assert result["local"] == pytest.approx(2.0) and result["verl"] == pytest.approx(2.5)
