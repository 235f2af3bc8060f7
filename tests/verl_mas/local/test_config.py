"""The local engine's config schema: checks at construction, names checked against the env, and its JSON form."""

from __future__ import annotations

import dataclasses
import json

import pytest

from verl_mas.advantage import GroupingError
from verl_mas.env import make_env
from verl_mas.local.config import (
    NUMERIC_KEYS,
    LocalTrainConfig,
    ModelSpec,
    WarmStartConfig,
    check_names,
    config_json,
    read_config,
    resolved_warm_start,
    trains_warm_start,
)
from verl_mas.local.generator import SamplingConfig
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import LocalRun
from verl_mas.overrides import parse_overrides


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"grouping": "episode"}, "grouping: unknown grouping 'episode'"),
        ({"k": 0}, "k must be an integer >= 1, got 0"),
        ({"device": "gpu0"}, "device must be 'cpu', 'cuda', 'cuda:N' or 'auto'"),
        ({"norm_adv_by_std": "no"}, "norm_adv_by_std must be true or false, got 'no'"),
    ],
)
def test_bad_config_fails_at_start(overrides, message):
    with pytest.raises(ValueError, match=message):
        LocalTrainConfig(**overrides)


@pytest.mark.parametrize("grouping", ["task_role_turn", "task_role", "task"])
def test_every_grouping_level_is_one_key(grouping, tmp_path):
    config = resolve_train_config(parse_overrides([f"grouping={grouping}", f"output_dir={tmp_path}"]))
    assert config.grouping == grouping
    (tmp_path / "config.json").write_text(config_json(config))
    assert read_config(tmp_path / "config.json").grouping == grouping
    assert LocalTrainConfig().grouping == "task_role_turn"  # AT-GRPO is the default


def test_norm_adv_by_std_is_one_key_and_kept_in_the_saved_config(tmp_path):
    config = resolve_train_config(parse_overrides(["norm_adv_by_std=false", f"output_dir={tmp_path}"]))
    assert config.norm_adv_by_std is False and LocalTrainConfig().norm_adv_by_std is True  # verl's default
    (tmp_path / "config.json").write_text(config_json(config))
    assert read_config(tmp_path / "config.json").norm_adv_by_std is False


@pytest.mark.parametrize("env", ["sokoban", "sudoku", "math", "code"])
def test_smoke_on_another_env_keeps_its_budget_and_leaves_plan_path_boards_out(env):
    config = resolve_train_config(parse_overrides(["preset=smoke", f"env={env}"]))
    assert (config.env, config.env_options, config.k, config.steps, config.model.hidden) == (env, {}, 2, 2, 32)
    make_env(env, **config.env_options)  # the env takes its own defaults
    plan_path = resolve_train_config(parse_overrides(["preset=smoke"]))
    assert plan_path.env_options["size"] == 4 and plan_path.env_options["max_turns"] == 2


def test_a_preset_for_one_env_alone_is_refused_on_another():
    with pytest.raises(
        ValueError, match=r"^preset=code_tool is for env plan_path, sokoban, sudoku alone .*, not env=math$"
    ):
        resolve_train_config(parse_overrides(["env=math", "preset=code_tool"]))
    assert resolve_train_config(parse_overrides(["preset=code_tool"])).env_options["tool_mode"] == "code"


def test_grouping_presets_and_the_unknown_level_message():
    assert resolve_train_config({"preset": "grouping_task_role"}).grouping == "task_role"
    assert resolve_train_config({"preset": "grouping_task"}).grouping == "task"
    levels = r"\['task_role_turn', 'task_role', 'task'\]"
    with pytest.raises(GroupingError, match=rf"^grouping: unknown grouping 'role'; use one of {levels}$"):
        resolve_train_config(parse_overrides(["grouping=role"]))


def test_sampling_and_update_temperatures_must_agree(capsys):
    with pytest.raises(ValueError, match="must equal sampling.temperature"):
        LocalTrainConfig(sampling=SamplingConfig(temperature=0.7))
    assert ModelSpec().path == "" and WarmStartConfig().epochs >= 1


def test_warm_start_defaults_follow_the_models_kind():
    scratch = LocalTrainConfig()
    assert trains_warm_start(scratch) and resolved_warm_start(scratch).lr == 3e-3
    loaded = LocalTrainConfig(model=ModelSpec(path="smollm2-135m-instruct"))
    assert not trains_warm_start(loaded)  # loaded weights are the start as they are, whatever epochs says
    assert not trains_warm_start(dataclasses.replace(loaded, warm_start=WarmStartConfig(epochs=4)))
    tuned = dataclasses.replace(loaded, warm_start=WarmStartConfig(tune_loaded=True))
    assert trains_warm_start(tuned) and resolved_warm_start(tuned).lr == 2e-5  # a pretrained model is tuned gently
    given = dataclasses.replace(loaded, warm_start=WarmStartConfig(tune_loaded=True, lr=1e-4))
    assert resolved_warm_start(given).lr == 1e-4  # what is set wins
    # a config built with a path through overrides resolves by the path, not by the default it was built over
    assert resolved_warm_start(resolve_train_config(parse_overrides(["model.path=some/folder"]))).lr == 2e-5
    # config.json holds the lr that ran: a scratch run's reads 0.003, as every run saved before the default existed
    assert json.loads(config_json(scratch))["warm_start"]["lr"] == 3e-3
    assert json.loads(config_json(tuned))["warm_start"]["lr"] == 2e-5
    with pytest.raises(ValueError, match=r"warm_start.lr must be a finite number > 0 or null, got 0"):
        LocalTrainConfig(warm_start=WarmStartConfig(lr=0))
    with pytest.raises(ValueError, match=r"warm_start.tune_loaded must be true or false, got 'yes'"):
        WarmStartConfig(tune_loaded="yes")


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
    # the warm start's None lr is saved as the rate it resolved to; the rest reads back as it was
    assert read_config(tmp_path / "config.json") == dataclasses.replace(config, warm_start=resolved_warm_start(config))
    assert config_json(read_config(tmp_path / "config.json")) == config_json(config)


@pytest.mark.parametrize(
    "override, message",
    [
        ("update.lr=nan", "update.lr must be a finite number > 0, got nan"),
        ("update.lr=-1", "update.lr must be a finite number > 0, got -1.0"),
        ("warm_start.lr=nan", "warm_start.lr must be a finite number > 0 or null, got nan"),
        ("alpha=nan", "alpha must be a finite number >= 0, got nan"),
        ("alpha=inf", "alpha must be a finite number >= 0, got inf"),
        ("update.betas=[0.9,1.5]", r"update.betas\[1\] must be a finite number in \[0, 1\), got 1.5"),
        ("update.clip_ratio_c=1", "update.clip_ratio_c must be a finite number > 1, got 1.0"),
        ("update.grad_clip=-1", "update.grad_clip must be a finite number > 0 or null, got -1.0"),
        ("update.kl_coef=nan", "update.kl_coef must be a finite number >= 0, got nan"),
        ("sampling.temperature=inf", "sampling.temperature must be a finite number > 0, got inf"),
        ("warm_start.play_skill=nan", r"warm_start.play_skill must be in \[0, 1\], got nan"),
        ("warm_start.tasks=0", "warm_start.tasks must be an integer >= 1, got 0"),
        ("lora.alpha=nan", "lora.alpha must be a finite number > 0, got nan"),
        ("seed=-1", r"seed must be an integer in \[0, 4294967295\], got -1"),
        ("policy_lr.shared=nan", "policy_lr.shared must be a finite number > 0, got nan"),
        ("model.heads=5", r"model.hidden \(64\) must be a multiple of model.heads \(5\)"),
    ],
)
def test_every_numeric_key_is_checked_at_start_naming_the_key_and_range(override, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        resolve_train_config(parse_overrides([override]))


def numeric_keys(config: object, prefix: str = "") -> list[str]:
    """The dotted names of every numeric field (bool excluded) of a config and its nested configs."""
    keys = []
    for field in dataclasses.fields(config):
        value, key = getattr(config, field.name), prefix + field.name
        if dataclasses.is_dataclass(value):
            keys += numeric_keys(value, key + ".")
        elif any(name in str(field.type) for name in ("int", "float")) and field.type != "bool":
            keys.append(key)
    return keys


def test_the_numeric_rules_cover_every_numeric_key():
    found = numeric_keys(LocalTrainConfig())
    assert "update.lr" in found and "sampling.role_max_new_tokens" in found and "update.betas" in found
    assert sorted(found) == sorted(NUMERIC_KEYS)


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_the_infra_failure_share_is_a_probability(share: float) -> None:
    assert LocalTrainConfig().max_infra_failure_share == 0.1
    with pytest.raises(ValueError, match="max_infra_failure_share"):
        LocalTrainConfig(max_infra_failure_share=share)


def test_a_preset_that_names_its_env_runs_there_and_refuses_another():
    config = resolve_train_config(parse_overrides(["preset=smollm2_math"]))
    assert config.env == "math" and config.env_options["worked_example"] and "size" not in config.env_options
    make_env(config.env, **config.env_options)  # the math env takes every option the preset gives it
    assert resolve_train_config(parse_overrides(["env=math", "preset=smollm2_math"])) == config
    assert resolve_train_config(parse_overrides(["preset=[smollm2_math,per_role]"])).router == "per_role"
    with pytest.raises(ValueError, match=r"^preset=smollm2_math is for env math alone .*, not env=sokoban$"):
        resolve_train_config(parse_overrides(["env=sokoban", "preset=smollm2_math"]))
    # an env the caller built into its base counts as given: research harnesses pass one
    with pytest.raises(ValueError, match=r"^preset=smollm2_math is for env math alone .*, not env=sudoku$"):
        resolve_train_config({"preset": "smollm2_math"}, LocalTrainConfig(env="sudoku", env_options={}))
    # the env is decided before any preset applies: a Plan-Path preset listed first keeps only its other keys
    both = resolve_train_config(parse_overrides(["preset=[smollm2,smollm2_math]"]))
    assert both.env_options == config.env_options and "size" not in both.warm_start.env_options
    assert both.warm_start.tasks == 128 and not both.warm_start.tune_loaded  # smollm2's tune size, the later preset's
