"""The local engine's config schema: checks at construction, names checked against the env, and its JSON form."""

from __future__ import annotations

import dataclasses
import json

import pytest

from verl_mas.local.config import LocalTrainConfig, ModelSpec, WarmStartConfig, check_names, config_json, read_config
from verl_mas.local.generator import SamplingConfig
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import LocalRun
from verl_mas.overrides import parse_overrides


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"grouping": "episode"}, "grouping must be"),
        ({"k": 0}, "k must be >= 1"),
        ({"device": "gpu0"}, "device must be 'cpu', 'cuda', 'cuda:N' or 'auto'"),
    ],
)
def test_bad_config_fails_at_start(overrides, message):
    with pytest.raises(ValueError, match=message):
        LocalTrainConfig(**overrides)


def test_sampling_and_update_temperatures_must_agree(capsys):
    with pytest.raises(ValueError, match="must equal sampling.temperature"):
        LocalTrainConfig(sampling=SamplingConfig(temperature=0.7))
    assert ModelSpec().path == "" and WarmStartConfig().epochs >= 1


def test_warm_start_corrupt_roles_must_be_role_names(tmp_path):
    config = resolve_train_config(parse_overrides(["warm_start.corrupt_roles=[plan]", f"output_dir={tmp_path}"]))
    assert config.warm_start.corrupt_roles == ("plan",)
    (tmp_path / "config.json").write_text(json.dumps(dataclasses.asdict(config)))
    assert read_config(tmp_path / "config.json").warm_start.corrupt_roles == ("plan",)
    with pytest.raises(ValueError, match="corrupt_roles must be a list of role names, got 'plan'"):
        resolve_train_config(parse_overrides(["warm_start.corrupt_roles=plan"]))
    bogus = resolve_train_config(parse_overrides(["warm_start.corrupt_roles=[critic]", f"output_dir={tmp_path}"]))
    with pytest.raises(
        ValueError, match=r"corrupt_roles names unknown role 'critic'; plan_path's roles: \['tool', 'plan'\]"
    ):
        LocalRun(bogus, log=lambda _: None)


def test_warm_start_play_skill_is_a_probability():
    with pytest.raises(ValueError, match="play_skill must be in"):
        WarmStartConfig(play_skill=1.5)


def test_warm_start_lr_schedule_must_be_known():
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        WarmStartConfig(lr_schedule="linear")


def test_names_are_checked_against_the_envs_roles_and_the_routers_policies():
    roles, policies = ("tool", "plan"), ("shared",)
    check_names(LocalTrainConfig(), roles, policies)  # the default names no role and no policy
    unknown_policy = r"^policy_lr names unknown policy 'plan'; this router's policies: \['shared'\]$"
    with pytest.raises(ValueError, match=unknown_policy):
        check_names(LocalTrainConfig(policy_lr={"plan": 1e-3}), roles, policies)
    limited = LocalTrainConfig(sampling=SamplingConfig(temperature=1.0, role_max_new_tokens={"critic": 8}))
    with pytest.raises(ValueError, match=r"^sampling.role_max_new_tokens names unknown role 'critic'; plan_path's"):
        check_names(limited, roles, policies)


def test_a_saved_config_reads_back_equal(tmp_path):
    overrides = ["preset=[code_tool,lora_per_role]", "env_options.size=6", "policy_lr.plan=1e-4", "resume=runs/x"]
    config = resolve_train_config(parse_overrides(overrides))
    (tmp_path / "config.json").write_text(config_json(config))
    assert read_config(tmp_path / "config.json") == config
