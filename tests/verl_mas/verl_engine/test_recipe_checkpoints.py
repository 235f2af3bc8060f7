"""Each recipe saves under an absolute folder of its own experiment, keeps two saves per policy, and its README's
optimizer-step counts follow from its yaml."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

RECIPES = Path(__file__).resolve().parents[3] / "recipes"
ENVS = ("code", "math", "plan_path", "sokoban", "sudoku")


@functools.cache
def recipe(env: str):
    """The recipe as composed (a copy each time: callers change it)."""
    with initialize_config_dir(config_dir=str(RECIPES / env), version_base=None):
        return compose(env)


def composed(env: str):
    return copy.deepcopy(recipe(env))


@pytest.mark.parametrize("env", ENVS)
def test_checkpoints_go_to_an_absolute_folder_per_experiment_with_two_kept(env, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    config = composed(env)
    assert config.trainer.default_local_dir == f"{tmp_path}/checkpoints/verl_mas/{env}"  # typed by hand
    assert config.trainer.max_actor_ckpt_to_keep == 2
    assert config.trainer.resume_mode == "auto"  # why the folder must be the experiment's own
    config.trainer.experiment_name = f"{env}_qwen3_8b_per_role"  # as the launcher names it
    assert config.trainer.default_local_dir == f"{tmp_path}/checkpoints/verl_mas/{env}_qwen3_8b_per_role"


@pytest.mark.parametrize("env", ENVS)
def test_the_readme_counts_optimizer_steps_from_the_yaml(env):
    config = OmegaConf.to_container(composed(env), resolve=False)
    mas, actor = config["mas"], config["actor_rollout_ref"]["actor"]
    assert config["actor_rollout_ref"]["rollout"]["n"] == 1  # verl multiplies the mini-batch by n: samples it is
    roles = 2  # every recipe's team (test_recipes.py checks each one's roles)
    one_role = config["data"]["train_batch_size"] * mas["rollout"]["max_turns"] * mas["rollout"]["k"]
    mini_batch = actor["ppo_mini_batch_size"]
    text = " ".join((RECIPES / env / "README.md").read_text().split())
    expected = (
        f"x {roles} roles x {mas['rollout']['max_turns']} turns x K = {mas['rollout']['k']} = {roles * one_role} "
        f"samples, so with `shared` one policy takes up to {roles * one_role} / {mini_batch} = "
        f"{roles * one_role // mini_batch} optimizer steps per training step; with `per_role` each policy takes its "
        f"role's {one_role} samples ({one_role // mini_batch} steps), and the single agent its {one_role} "
        f"({one_role // mini_batch} steps)"
    )
    assert expected in text
    yaml_text = (RECIPES / env / f"{env}.yaml").read_text()
    assert f"up to {roles * one_role // mini_batch} optimizer steps a training step" in yaml_text
