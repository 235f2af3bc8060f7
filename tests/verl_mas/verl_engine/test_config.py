"""Tests of the `mas:` schema: hand-written valid settings, hostile values, and errors that name the key."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from verl_mas.advantage import GroupingError
from verl_mas.rollout import RolloutConfig
from verl_mas.verl_engine.config import MasConfig, MasConfigError, PolicyConfig


def mas(**overrides):
    node = {"env": "sudoku", "router": "per_role", "rollout": {"k": 8, "alpha": 1.0, "max_turns": 5}}
    node.update(overrides)
    return node


def test_full_settings_are_read_exactly():
    config = MasConfig.from_mapping(
        {
            "env": "plan_path",
            "env_options": {"size": 8, "single_agent": False},
            "router": {"tool": "coder", "plan": "planner"},
            "rollout": {"k": 4, "alpha": 0.5, "max_turns": 3, "select": "team_reward"},
            "grouping": "task",
            "policies": {"coder": {"model_path": "/models/a", "n_gpus_per_node": 2, "lora_rank": 16}},
        }
    )
    assert config.env == "plan_path"
    assert config.env_options == {"size": 8, "single_agent": False}
    assert config.rollout == RolloutConfig(k=4, alpha=0.5, max_turns=3, select="team_reward")
    assert config.grouping == "task"
    assert config.roles == ("tool", "plan")
    router = config.policy_router()
    assert router.policy_of("tool") == "coder" and router.policy_of("plan") == "planner"
    assert config.policy_settings() == {
        "coder": PolicyConfig(model_path="/models/a", n_gpus_per_node=2, lora_rank=16),
        "planner": PolicyConfig(),
    }


def test_defaults_are_the_reference_settings():
    config = MasConfig.from_mapping({"env": "sokoban"})
    assert config.router == "shared"
    assert config.rollout == RolloutConfig(k=8, alpha=1.0, max_turns=None, select="reward")
    assert config.grouping == "task_role_turn"
    assert config.policy_router().policies == ("shared",)


def test_an_omegaconf_node_is_accepted():
    node = OmegaConf.create(mas(env_options={"single_agent": True}, router="shared"))
    config = MasConfig.from_mapping(node)
    assert config.roles == ("plan",)
    assert config.env_options == {"single_agent": True}
    assert config.policy_router().role_to_policy == (("plan", "shared"),)


@pytest.mark.parametrize(
    "node, message",
    [
        ({}, r"^mas: missing required key\(s\) \['env'\]"),
        (mas(env="nope"), r"^mas\.env: unknown environment 'nope'; known: (?=.*plan_path)(?=.*sokoban)(?=.*sudoku)"),
        (mas(env=3), r"^mas\.env must be an environment name, got 3"),
        (mas(env="no_such_pkg.games:Game"), r"^mas\.env: environment 'no_such_pkg\.games:Game': cannot import module"),
        (mas(env="verl_mas.env:Task"), r"^mas\.env: environment 'verl_mas\.env:Task': .* not a concrete MultiAgentEnv"),
        (mas(env_options={"bogus": 1}), r"^mas\.env_options: bad options for environment 'sudoku'.*'bogus'"),
        (mas(env_options={"single_agent": "yes"}), r"^mas\.env_options: .*single_agent must be true or false"),
        (mas(env_options=["size"]), r"^mas\.env_options must be a mapping"),
        (mas(router="everyone"), r"^mas\.router: unknown router 'everyone'; use one of \['shared', 'per_role'\]"),
        (
            mas(router={"tool": "a", "coder": "b", "plan": "a"}),
            r"^mas\.router: unknown role\(s\) \['coder'\] in mapping; the environment's roles are \['tool', 'plan'\]",
        ),
        (mas(router={"tool": "a"}), r"^mas\.router: role\(s\) \['plan'\] have no policy"),
        (
            mas(env_options={"single_agent": True}, router={"tool": "a", "plan": "b"}),
            r"^mas\.router: unknown role\(s\) \['tool'\] in mapping; the environment's roles are \['plan'\]",
        ),
        (mas(rollout={"k": 0}), r"^mas\.rollout\.k must be >= 1, got 0"),
        (mas(rollout={"k": "8"}), r"^mas\.rollout\.k must be an integer, got '8'"),
        (mas(rollout={"k": True}), r"^mas\.rollout\.k must be an integer, got True"),
        (mas(rollout={"k": 2.5}), r"^mas\.rollout\.k must be an integer, got 2\.5"),
        (mas(rollout={"max_turns": 0}), r"^mas\.rollout\.max_turns must be >= 1 or None, got 0"),
        (mas(rollout={"alpha": -0.5}), r"^mas\.rollout\.alpha must be a finite number >= 0, got -0\.5"),
        (mas(rollout={"alpha": math.nan}), r"^mas\.rollout\.alpha must be a finite number >= 0, got nan"),
        (mas(rollout={"alpha": math.inf}), r"^mas\.rollout\.alpha must be a finite number >= 0, got inf"),
        (mas(rollout={"alpha": "high"}), r"^mas\.rollout\.alpha must be a finite number >= 0, got 'high'"),
        (mas(rollout={"alpha": True}), r"^mas\.rollout\.alpha must be a finite number >= 0, got True"),
        (mas(rollout={"select": "best"}), r"^mas\.rollout\.select must be 'reward' or 'team_reward', got 'best'"),
        (mas(rollout={"with_expert": True}), r"^mas\.rollout\.with_expert must be false"),
        (mas(rollout={"n": 8}), r"^mas\.rollout: unknown key\(s\) \['n'\]; known keys: \['k', 'alpha', "),
        (mas(rollout=8), r"^mas\.rollout must be a mapping, got 8"),
        (mas(kk=8), r"^mas: unknown key\(s\) \['kk'\]; known keys: \['env', 'env_options', 'router', "),
        (
            mas(router="shared", policies={"tool": {}}),
            r"^mas\.policies\.tool: no role uses policy 'tool'; the router's policies are \['shared'\]",
        ),
        (mas(policies={"tool": {"lr": 1e-6}}), r"^mas\.policies\.tool: unknown key\(s\) \['lr'\]; known keys: "),
        (mas(policies={"tool": {"lora_rank": -1}}), r"^mas\.policies\.tool\.lora_rank must be an integer >= 0, got -1"),
        (
            mas(policies={"tool": {"lora_rank": 8.0}}),
            r"^mas\.policies\.tool\.lora_rank must be an integer >= 0, got 8\.0",
        ),
        (
            mas(policies={"plan": {"n_gpus_per_node": 0}}),
            r"^mas\.policies\.plan\.n_gpus_per_node must be an integer >= 1 or null, got 0",
        ),
        (mas(policies={"plan": {"model_path": 7}}), r"^mas\.policies\.plan\.model_path must be a string, got 7"),
        (mas(policies=["tool"]), r"^mas\.policies must be a mapping of policy id -> settings"),
    ],
)
def test_bad_settings_fail_naming_the_key(node, message):
    with pytest.raises(MasConfigError, match=message):
        MasConfig.from_mapping(node)


@pytest.mark.parametrize("grouping", ["turn", "", "Task", None, 3, ["task"]])
def test_a_bad_grouping_fails_with_the_grouping_check_every_engine_uses(grouping):
    choices = r"\['task_role_turn', 'task_role', 'task'\]"
    with pytest.raises(GroupingError, match=rf"^mas\.grouping: unknown grouping .*; use one of {choices}$"):
        MasConfig.from_mapping(mas(grouping=grouping))


def test_the_timeline_is_a_file_path_or_null():
    assert MasConfig.from_mapping(mas(timeline="/tmp/t.jsonl")).timeline == "/tmp/t.jsonl"
    assert MasConfig.from_mapping(mas(timeline=None)).timeline is None
    for bad in ("", 3, ["a"]):
        with pytest.raises(MasConfigError, match=r"^mas\.timeline must be a file path or null, got "):
            MasConfig.from_mapping(mas(timeline=bad))


def test_direct_construction_is_validated_too():
    with pytest.raises(GroupingError, match=r"^mas\.grouping: unknown grouping 'role'"):
        MasConfig(env="sudoku", grouping="role")
    with pytest.raises(MasConfigError, match=r"^mas\.router: unknown role\(s\) \['judge'\]"):
        MasConfig(env="sudoku", router={"tool": "a", "plan": "a", "judge": "a"})
    with pytest.raises(ValueError, match=r"^rollout\.alpha must be a finite number >= 0, got -1"):
        MasConfig(env="sudoku", rollout=RolloutConfig(alpha=-1))  # the rollout's own check, before MasConfig's


@pytest.mark.parametrize(
    "router, policies, n_gpus, expected",
    [
        ("shared", {}, 8, {"shared": 8}),
        ("per_role", {}, 8, {"tool": 4, "plan": 4}),
        ("per_role", {"tool": {"n_gpus_per_node": 2}}, 8, {"tool": 2, "plan": 6}),
        ("per_role", {"tool": {"n_gpus_per_node": 3}, "plan": {"n_gpus_per_node": 5}}, 8, {"tool": 3, "plan": 5}),
        ({"tool": "m", "plan": "m"}, {}, 2, {"m": 2}),
    ],
)
def test_gpus_per_policy_by_hand(router, policies, n_gpus, expected):
    config = MasConfig.from_mapping(mas(router=router, policies=policies))
    assert config.gpus_per_policy(n_gpus) == expected


@pytest.mark.parametrize(
    "policies, n_gpus, message",
    [
        ({}, 7, r"7 GPU\(s\) per node left for policies \['tool', 'plan'\] cannot be shared equally"),
        ({}, 1, r"1 GPU\(s\) per node left for policies \['tool', 'plan'\] cannot be shared equally"),
        ({"tool": {"n_gpus_per_node": 8}}, 8, r"0 GPU\(s\) per node left for policies \['plan'\]"),
        (
            {"tool": {"n_gpus_per_node": 6}, "plan": {"n_gpus_per_node": 4}},
            8,
            r"\{'tool': 6, 'plan': 4\} must add up to trainer\.n_gpus_per_node=8",
        ),
        (
            {"tool": {"n_gpus_per_node": 3}, "plan": {"n_gpus_per_node": 4}},
            8,
            r"\{'tool': 3, 'plan': 4\} must add up to trainer\.n_gpus_per_node=8",
        ),
    ],
)
def test_gpus_per_policy_rejects_splits_that_do_not_fit(policies, n_gpus, message):
    config = MasConfig.from_mapping(mas(policies=policies))
    with pytest.raises(MasConfigError, match=r"^mas\.policies\.\*\.n_gpus_per_node: " + message):
        config.gpus_per_policy(n_gpus)


@pytest.mark.parametrize("share", [-0.1, 1.5, "half", True])
def test_the_infra_failure_share_is_a_number_in_the_unit_interval(share):
    assert MasConfig.from_mapping({"env": "sudoku"}).max_infra_failure_share == 0.1
    with pytest.raises(MasConfigError, match="mas.max_infra_failure_share must be a number in"):
        MasConfig.from_mapping({"env": "sudoku", "max_infra_failure_share": share})
