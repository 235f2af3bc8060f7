"""research.grouping: the tool-cost regime's env and the advantage diagnostic, on hand-made inputs."""

import json
import math
from types import SimpleNamespace

import pytest
from saved_run_testkit import TINY

from research.grouping import figures, grouping
from verl_mas.advantage import GROUPINGS
from verl_mas.dataset import split_tasks
from verl_mas.local.callbacks import RunCallbacks
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.train import sample_advantages, train
from verl_mas.overrides import apply_overrides

OPTIONS = {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3, "brief_prompts": True}


def test_the_tool_pays_its_cost_and_nothing_else_changes():
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


def test_the_breakdown_shows_what_task_grouping_does_to_the_cheaper_paid_role():
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


class Capture(RunCallbacks):
    def __init__(self) -> None:
        self.steps: list[tuple] = []

    def advantages(self, run, step, samples, advantages):
        self.steps.append((list(samples), advantages.tolist()))


def test_the_advantage_recorder_writes_every_steps_breakdown_and_a_fresh_run_starts_afresh(tmp_path):
    config = apply_overrides(LocalTrainConfig(), TINY | {"steps": 2, "eval_tasks": 2, "output_dir": str(tmp_path)})
    (tmp_path / grouping.STATS_FILE).write_text('{"step": 1}\n')  # an earlier run's record: a fresh run drops it
    capture = Capture()
    train(config, log=lambda line: None, callbacks=[grouping.AdvantageRecorder(), capture])
    lines = (tmp_path / grouping.STATS_FILE).read_text().splitlines()
    expected = [
        {"step": step + 1, "grouping": "task_role_turn", **grouping.advantage_breakdown(samples, advantages)}
        for step, (samples, advantages) in enumerate(capture.steps)
    ]
    assert [json.loads(line) for line in lines] == json.loads(json.dumps(expected)) and len(lines) == 2


def test_the_ablation_record_keeps_what_the_page_reads_in_the_form_of_its_data():
    cell = {"n": 8, "reward": 0.5, "advantage": -0.25, "negative_share": 0.75, "all_negative_groups": 0.5}
    result = {"cells": {name: cell for name in ("tool", "plan", "turn0", "turn1", "turn2", "tool/turn0")}}
    found = {3: {"key": "k", "tasks": 16, **{g: result | {"offset_share": 0.9} for g in (*GROUPINGS, "no_tree")}}}
    paired = [
        {"arm": "mas_grpo_task", "metric": metric, "per_seed": [0.125], "mean": 0.125}
        for metric in ("eval/success", *grouping.ABLATION_METRICS)
    ]
    record = grouping.ablation_record(found, paired)
    kept = {"advantage": -0.25, "negative_share": 0.75, "all_negative_groups": 0.5}
    assert record["advantages"]["3"]["task"] == {"offset_share": 0.9, "cells": dict.fromkeys(figures.CELLS, kept)}
    assert record["paired"] == dict.fromkeys(grouping.ABLATION_METRICS, {"mas_grpo_task": [0.125]})
    committed = json.loads((figures.DATA / figures.ABLATION_FILE).read_text())
    assert committed["paired"].keys() == record["paired"].keys()
    for seed in committed["advantages"].values():
        assert seed.keys() == record["advantages"]["3"].keys()
        assert {name: list(g["cells"]) for name, g in seed.items()} == dict.fromkeys(seed, list(figures.CELLS))
