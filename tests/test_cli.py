"""Tests of the command line, overrides, scripted policy and metrics."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from mas_testkit import ScriptedGenerator, spread_script
from verl_mas.cli import main
from verl_mas.demo import DemoConfig
from verl_mas.env import Task
from verl_mas.metrics import rollout_metrics
from verl_mas.overrides import apply_overrides, parse_overrides
from verl_mas.rollout import GenerationRequest, RolloutConfig, rollout_tasks
from verl_mas.router import PolicyRouter
from verl_mas.scripted import ExpertMixPolicy


def test_parse_overrides_nests_and_types_values():
    assert parse_overrides(["k=8", "env_options.size=6", "alpha=0.5", "env=sudoku", "flag=true"]) == {
        "k": 8,
        "env_options": {"size": 6},
        "alpha": 0.5,
        "env": "sudoku",
        "flag": True,
    }
    assert parse_overrides(["update.lr=3e-5", "name=3e-5x", "n=inf"]) == {
        "update": {"lr": 3e-5},
        "name": "3e-5x",
        "n": float("inf"),
    }
    with pytest.raises(ValueError, match="not of the form key=value"):
        parse_overrides(["k8"])


def test_apply_overrides_merges_mappings_and_names_bad_keys():
    config = apply_overrides(DemoConfig(), {"k": 2, "alpha": 1, "env_options": {"size": 5}})
    assert config.k == 2 and config.alpha == 1.0 and isinstance(config.alpha, float)
    assert config.env_options == {**DemoConfig().env_options, "size": 5}
    with pytest.raises(ValueError, match="unknown config key 'kk'; known keys: .*k,"):
        apply_overrides(DemoConfig(), {"kk": 1})
    with pytest.raises(ValueError, match="'k' expects an integer"):
        apply_overrides(DemoConfig(), {"k": "eight"})


def test_demo_prints_tree_and_metrics(capsys):
    assert main(["demo", "tasks=2", "k=3", "seed=1"]) == 0
    out = capsys.readouterr().out
    assert "Tree of verl_mas/plan_path/train/0" in out and "rollout/success" in out
    assert out.count("*") >= 2  # at least one continued branch per role


def test_demo_is_deterministic(capsys):
    main(["demo", "tasks=2", "k=3", "seed=5"])
    first = capsys.readouterr().out
    main(["demo", "tasks=2", "k=3", "seed=5"])
    assert capsys.readouterr().out == first


def test_cli_errors_name_the_problem(capsys):
    assert main(["demo", "nope=1"]) == 2
    assert "unknown config key 'nope'" in capsys.readouterr().err
    assert main(["demo", "env=no_such_env"]) == 2
    assert "unknown environment 'no_such_env'; known:" in capsys.readouterr().err


def test_data_command_writes_both_splits(tmp_path, capsys):
    assert main(["data", "--env", "sudoku", "--out", str(tmp_path), "--train", "3", "--eval", "2", "size=4"]) == 0
    assert (tmp_path / "train.parquet").exists() and (tmp_path / "eval.parquet").exists()


def test_expert_mix_policy_needs_the_expert_and_mixes_it():
    request = GenerationRequest("t/a", "p", "a", ({"role": "user", "content": "x"},), n=64, expert="U R R D")
    texts = [g.text for g in asyncio.run(ExpertMixPolicy(skill=0.5, seed=0)(request))]
    assert 10 < texts.count("U R R D") < 54 and len(set(texts)) > 1
    with pytest.raises(ValueError, match="with_expert=True"):
        asyncio.run(ExpertMixPolicy()(dataclasses.replace(request, expert=None)))


def test_rollout_metrics_hand_computed():
    gen = ScriptedGenerator(spread_script)
    router = PolicyRouter.from_spec("shared", ("a", "b"))

    def factory(task):
        from mas_testkit import CounterEnv

        env = CounterEnv()
        env.reset(task)
        env.target = 5
        return env

    results = asyncio.run(rollout_tasks([Task("t0", "counter", 0)], gen, router, RolloutConfig(k=5), factory))
    metrics = rollout_metrics(results)
    assert metrics["rollout/success"] == 1.0 and metrics["rollout/samples"] == 10
    assert metrics["rollout/a/turn0/team_reward"] == pytest.approx((-0.2 + 0 + 0.2 + 0.4 + 0.6) / 5)
    assert metrics["rollout/a/turn0/response_length"] == pytest.approx((2 + 1 + 1 + 1 + 1) / 5)
    assert metrics["rollout/zero_variance_share"] == 0.0
