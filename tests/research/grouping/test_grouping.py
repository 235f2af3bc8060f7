"""experiments/grouping.py: the tool-cost regime's env and the advantage diagnostic, on hand-made inputs."""

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from script_testkit import loaded_script

from verl_mas.dataset import split_tasks
from verl_mas.local.train import sample_advantages

OPTIONS = {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True}


@pytest.fixture(scope="module")
def grouping():
    with loaded_script("experiments/grouping.py", "grouping_experiment") as module:
        yield module


def test_the_tool_pays_its_cost_and_nothing_else_changes(grouping):
    from verl_mas_envs.puzzles.plan_path import PlanPathEnv

    (task,) = split_tasks("plan_path", "train", 1, 0, {**OPTIONS, "tool_cost": 2.0})
    costly, plain = grouping.PlanPathToolCost(**OPTIONS), PlanPathEnv(**OPTIONS)
    costly.reset(task)  # the task's options carry the cost, as the training tasks do
    plain.reset(split_tasks("plan_path", "train", 1, 0, OPTIONS)[0])
    assert costly.config.tool_cost == 2.0 and costly.render(costly.state.position) == plain.render(plain.state.position)
    for role in ("tool", "plan"):
        move = plain.expert(role)
        paid, free = costly.step(role, move), plain.step(role, move)
        assert paid.team_reward == free.team_reward and paid.valid == free.valid
        assert paid.local_reward == pytest.approx(free.local_reward - (2.0 if role == "tool" else 0.0))


def sample(task: str, role: str, turn: int, reward: float) -> SimpleNamespace:
    return SimpleNamespace(task_uid=task, role=role, turn=turn, reward=reward)


def test_the_breakdown_shows_what_task_grouping_does_to_the_cheaper_paid_role(grouping):
    # one task, two candidates per (role, turn): the tool's rewards sit 2 below the plan's
    samples = [
        sample("t", "tool", 0, -2.0), sample("t", "tool", 0, -1.0),
        sample("t", "plan", 0, 0.0), sample("t", "plan", 0, 1.0),
        sample("t", "tool", 1, -2.0), sample("t", "tool", 1, -2.0),
        sample("t", "plan", 1, 0.5), sample("t", "plan", 1, 1.5),
    ]  # fmt: skip
    fine = grouping.advantage_breakdown(samples, sample_advantages(samples, "task_role_turn").tolist())
    assert fine["offset_share"] == pytest.approx(0.0, abs=1e-9)
    assert fine["cells"]["tool"]["advantage"] == pytest.approx(0.0, abs=1e-6)
    assert fine["cells"]["tool/turn1"] == {
        "n": 2, "reward": -2.0, "advantage": 0.0, "negative_share": 0.0, "all_negative_groups": 0.0
    }  # fmt: skip
    coarse = grouping.advantage_breakdown(samples, sample_advantages(samples, "task").tolist())
    tool, plan = coarse["cells"]["tool"], coarse["cells"]["plan"]
    assert tool["negative_share"] == 1.0 and tool["all_negative_groups"] == 1.0 and plan["negative_share"] == 0.0
    # one group: mean -0.5, squared deviations 14.5, unbiased std sqrt(14.5 / 7); the tool's mean reward, -1.75, sits
    # 1.25 below the group's mean, the plan's as far above it
    assert tool["advantage"] == pytest.approx(-1.25 / math.sqrt(14.5 / 7), abs=1e-5) == -plan["advantage"]
    assert 0.5 < coarse["offset_share"] < 1.0  # most of the spread is the (role, turn) offsets


def test_the_results_page_quotes_its_record():
    """docs/results/grouping.md quotes the paired differences and the diagnostic of docs/results/grouping/, so a figure
    cannot drift alone."""
    import json

    results = Path(__file__).resolve().parents[2] / "docs" / "results"
    page = (results / "grouping.md").read_text()
    record = json.loads((results / "grouping" / "diagnostics.json").read_text())
    names = {"eval/success", "eval_sampled/success", "eval_sampled/tool/invalid_move_share"}
    quoted = [row for row in record["paired"] if row["metric"] in names]
    assert len(quoted) == 9 and all(row["n"] == 8 for row in quoted)
    for row in quoted:
        low, high = row["ci95"]
        for text in (f"{row['mean']:+.3f} ({row['se']:.3f})", f"[{low:+.3f}, {high:+.3f}]"):
            assert text in page, (row["arm"], row["metric"], text)
    (warm,) = [table for table in page.split("\n\n") if table.startswith("| grouping |") and "| no_tree |" in table]
    tool = record["warm_start"]  # per seed; the page shows the mean over seeds
    mean = sum(seed["task"]["cells"]["tool"]["advantage"] for seed in tool.values()) / len(tool)
    assert f"| task | {mean:+.2f} (" in warm
