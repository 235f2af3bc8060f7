"""The local training loop on a very small Plan-Path setting: the train command's outputs, tasks, advantages."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from verl_mas.cli import main
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.train import make_tasks, sample_advantages
from verl_mas.sample import Sample

TINY = {
    "env_options": {"size": 4, "wall_ratio": 0.1, "tool_mode": "compact", "max_turns": 2},
    "k": 2,
    "tasks_per_step": 2,
    "steps": 1,
    "eval_tasks": 2,
    "eval_every": 1,
}


def test_train_command_writes_metrics_curve_and_config(tmp_path, capsys, monkeypatch):
    from verl_mas.local import train as local_train

    served = local_train.registered_estimator()
    normalised = []

    def recording(**kwargs):
        normalised.append(kwargs["norm_adv_by_std"])
        return served(**kwargs)

    monkeypatch.setattr(local_train, "registered_estimator", lambda: recording)
    args = [f"{k}={json.dumps(v)}" for k, v in TINY.items()]
    args += [
        "norm_adv_by_std=false",
        "warm_start.tasks=4",
        "warm_start.epochs=1",
        "model.hidden=32",
        "model.vocab_size=300",
        "sampling.max_new_tokens=8",
        f"output_dir={tmp_path}",
    ]
    assert main(["train", *args]) == 0
    assert "held-out success" in capsys.readouterr().out
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1]
    assert "rollout/success" in lines[1] and "eval/success" in lines[1] and "update/shared/pg_loss" in lines[1]
    assert (tmp_path / "learning_curve.png").stat().st_size > 1000
    assert json.loads((tmp_path / "config.json").read_text())["k"] == 2
    assert normalised == [False]  # the one training step's advantages, as the key asked


def test_train_and_eval_tasks_never_overlap():
    config = LocalTrainConfig()
    train_seeds = {t.seed for t in make_tasks(config, "train", 0, 500)}
    eval_seeds = {t.seed for t in make_tasks(config, "eval", 0, 100)}
    assert not train_seeds & eval_seeds
    assert {t.split for t in make_tasks(config, "eval", 0, 3)} == {"eval"}


def sample(uid, role, turn, reward):
    return Sample(uid, role, turn, 0, "p", (1,), (2,), None, reward, 0.0, reward, False)


def test_advantage_grouping_ablation():
    samples = [sample("t", "a", 0, 1.0), sample("t", "a", 0, 3.0), sample("t", "b", 0, 10.0), sample("t", "b", 0, 10.0)]
    by_key = sample_advantages(samples, "task_role_turn")
    by_task = sample_advantages(samples, "task")
    s = 1 / 2**0.5
    assert by_key.tolist() == pytest.approx([-s, s, 0.0, 0.0], abs=1e-5)
    assert by_task[2].item() > 0 and by_task[0].item() < by_task[1].item() < 0
    assert torch.isclose(by_task.sum(), torch.tensor(0.0), atol=1e-5)


def test_without_std_normalisation_a_small_reward_gap_stays_small():
    # One reply a little above three at the floor: dividing by the std makes its gap a unit-sized advantage.
    rewards = [-0.25, -0.25, -0.25, -0.2]
    samples = [sample("t", "tester", 0, r) for r in rewards]
    normed = sample_advantages(samples, "task_role_turn")
    centred = sample_advantages(samples, "task_role_turn", norm_adv_by_std=False)
    assert centred.tolist() == pytest.approx([-0.0125, -0.0125, -0.0125, 0.0375], abs=1e-6)  # minus the mean, -0.2375
    std = 0.025  # sqrt((3 * 0.0125**2 + 0.0375**2) / 3), unbiased like torch.std
    assert normed.tolist() == pytest.approx([-0.0125 / std, -0.0125 / std, -0.0125 / std, 0.0375 / std], abs=1e-4)


def test_local_advantages_come_from_verls_estimator_registry(monkeypatch):
    from verl.trainer.ppo import core_algos

    served = core_algos.ADV_ESTIMATOR_REGISTRY["at_grpo"]
    calls = []

    def recording(**kwargs):
        calls.append(kwargs["grouping"])
        return served(**kwargs)

    monkeypatch.setitem(core_algos.ADV_ESTIMATOR_REGISTRY, "at_grpo", recording)
    samples = [sample("t", "a", 0, 1.0), sample("t", "a", 0, 3.0)]
    assert sample_advantages(samples, "task").tolist() == pytest.approx([-(0.5**0.5), 0.5**0.5], abs=1e-5)
    assert calls == ["task"]


def test_sampler_seed_draws_other_samples_on_the_same_boards_and_nothing_else_moves():
    from verl_mas.local.train import LocalRun
    from verl_mas.overrides import apply_overrides

    base = apply_overrides(
        LocalTrainConfig(),
        TINY
        | {
            "warm_start": {"tasks": 4, "epochs": 1},
            "model": {"hidden": 32, "vocab_size": 300},
            "sampling": {"max_new_tokens": 8},
            "progress": False,
        },
    )

    def draws(config):
        run = LocalRun(config, log=lambda _: None)
        tasks = make_tasks(config, "train", 0, 4)
        texts = [s.text for r in run.rollout(tasks, run.sampler, 4, "tree") for s in r.samples]
        weights = [p.detach().clone() for p in next(iter(run.models.values())).parameters()]
        return [t.seed for t in tasks], texts, weights

    boards, texts, weights = draws(base)
    same = draws(apply_overrides(base, {"sampler_seed": 0}))  # the run's seed, given explicitly
    other = draws(apply_overrides(base, {"sampler_seed": 7}))
    assert same[0] == boards and same[1] == texts
    assert other[0] == boards  # the same boards
    assert all(torch.equal(a, b) for a, b in zip(other[2], weights, strict=True))  # the same warm start
    assert other[1] != texts  # other samples
    with pytest.raises(ValueError, match="sampler_seed must be an integer in"):
        apply_overrides(base, {"sampler_seed": -1})


def test_a_smoke_run_logs_the_health_of_its_advantage_groups(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="verl_mas.group_health")
    assert main(["train", "preset=smoke", "steps=1", f"output_dir={tmp_path}", "progress=false"]) == 0
    step = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()][1]
    health = {key: value for key, value in step.items() if key.startswith("group_health/")}
    # the tree rollout with K = 2 under AT-GRPO's (task, role, turn): pairs that share one prompt, centred on it
    assert health["group_health/samples"] == step["rollout/samples"]
    assert health["group_health/groups"] == step["rollout/samples"] / 2
    assert health["group_health/singleton_share"] == 0.0
    assert health["group_health/zero_variance_share"] == step["rollout/zero_variance_share"]
    assert health["group_health/mixed_prompt_share"] == 0.0
    assert health["group_health/prompt_offset_share"] == pytest.approx(0.0, abs=1e-9)
    # a mean advantage for every (role, turn) the rollout played

    def role_turns(prefix: str, name: str) -> set[tuple[str, ...]]:
        keys = [key.split("/") for key in step if key.startswith(f"{prefix}/") and key.endswith(f"/{name}")]
        return {tuple(parts[1:3]) for parts in keys if len(parts) == 4}

    assert role_turns("group_health", "advantage_mean") == role_turns("rollout", "samples") != set()
    warned = [r.getMessage() for r in caplog.records if r.name == "verl_mas.group_health"]
    nearly_flat = health["group_health/zero_variance_share"] >= 0.9
    assert [("(zero_variance)" in message) for message in warned] == [True] * nearly_flat
