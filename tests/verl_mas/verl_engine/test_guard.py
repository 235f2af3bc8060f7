"""The on-policy guard on hand-made batches (each role's mean sampler-vs-actor log-prob gap, a role served by the
wrong adapter stops the run naming it), the `mas:` keys of LoRA per role and of the guard, and a reward model
refused (the environment gives every reward)."""

from __future__ import annotations

import math

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from verl_mas.main import CONFIG_DIR
from verl_mas.verl_engine.batch import SampleTags
from verl_mas.verl_engine.config import DEFAULT_MAX_LOGPROB_GAP, MasConfig, MasConfigError, check_supported
from verl_mas.verl_engine.guard import OffPolicyRollout, check_on_policy, gap_metrics, logprob_gaps


def tags(rows: list[tuple[str, str]], padding: list[bool] | None = None, infra: list[bool] | None = None):
    """Sample tags of rows given as (policy, role); `infra` marks rows the judge could not run."""
    infra = infra or [False] * len(rows)
    fields = [
        {"task_uid": f"t{i}", "role": role, "turn": 0, "policy": policy, "mixed_reward": 0.0, "infra_failure": bad}
        for i, ((policy, role), bad) in enumerate(zip(rows, infra, strict=True))
    ]
    return SampleTags.from_rows(fields, padding or [False] * len(rows))


def test_gap_is_the_mean_over_each_roles_response_tokens():
    rows = tags([("tool", "tool"), ("plan", "plan"), ("tool", "tool"), ("plan", "plan")], padding=[0, 0, 0, 1])
    sampler = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 9.0], [-1.0, -1.0, -1.0], [-5.0, -5.0, -5.0]])
    actor = torch.tensor([[-1.1, -2.0, -2.6], [-0.5, -0.7, 0.0], [-1.0, -1.3, -7.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 1]])
    gaps = logprob_gaps(rows, sampler, actor, mask)
    # tool: |0.1|, 0, |0.4| on row 0 and 0, |0.3| on row 2 (its masked 6.0 is not a response token): 0.8 / 5
    # plan: 0 and |0.2| on row 1; row 3 is padding
    assert gaps == pytest.approx({("tool", "tool"): 0.16, ("plan", "plan"): 0.1})
    assert gap_metrics(gaps) == pytest.approx({"mas/tool/logprob_gap": 0.16, "mas/plan/logprob_gap": 0.1})


def test_rows_that_do_not_train_are_left_out():
    rows = tags([("shared", "tool"), ("shared", "tool"), ("shared", "plan")], infra=[False, True, False])
    sampler = torch.tensor([[-1.0, -1.0], [-9.0, -9.0], [-2.0, -2.0]])
    actor = torch.tensor([[-1.5, -1.5], [0.0, 0.0], [-2.0, -2.0]])
    mask = torch.tensor([[1, 1], [1, 1], [0, 0]])  # the plan row is an empty reply: no token
    assert logprob_gaps(rows, sampler, actor, mask) == pytest.approx({("shared", "tool"): 0.5})


def test_the_wrong_adapter_stops_the_run_naming_the_role():
    # the plan role's tokens were sampled by the tool adapter: its log-probs are far from plan's recompute
    rows = tags([("tool", "tool"), ("plan", "plan"), ("plan", "plan")])
    served_by_tool = torch.tensor([[-1.0, -1.0], [-0.2, -3.0], [-0.1, -0.1]])
    recomputed = torch.tensor([[-1.001, -1.002], [-1.2, -0.9], [-0.4, -0.1]])
    gaps = logprob_gaps(rows, served_by_tool, recomputed, torch.ones(3, 2))
    assert gaps[("plan", "plan")] == pytest.approx((1.0 + 2.1 + 0.3 + 0.0) / 4)
    check_on_policy({("tool", "tool"): gaps[("tool", "tool")]}, DEFAULT_MAX_LOGPROB_GAP, adapters=True)
    with pytest.raises(OffPolicyRollout) as raised:
        check_on_policy(gaps, DEFAULT_MAX_LOGPROB_GAP, adapters=True)
    message = str(raised.value)
    assert "role 'plan' (adapter 'plan'): 0.85" in message and "'tool'" not in message
    assert "mas.max_logprob_gap=0.1" in message
    with pytest.raises(OffPolicyRollout, match=r"role 'plan' \(policy 'shared'\)"):
        check_on_policy({("shared", "plan"): 0.3, ("shared", "tool"): 0.01}, 0.1)


def test_bound_edges():
    check_on_policy({("p", "r"): 0.1}, 0.1)  # at the bound: on policy
    check_on_policy({("p", "r"): 5.0}, None)  # the guard is off
    with pytest.raises(OffPolicyRollout, match="nan"):
        check_on_policy({("p", "r"): math.nan}, 0.1)


def mas(**keys):
    return MasConfig.from_mapping({"env": "plan_path", **keys})


def test_guard_is_on_by_default_and_its_bound_is_checked():
    assert mas().max_logprob_gap == DEFAULT_MAX_LOGPROB_GAP == 0.1
    assert mas(max_logprob_gap=None).max_logprob_gap is None
    assert mas(max_logprob_gap=0.02).max_logprob_gap == 0.02
    for bad in (0, -0.1, True, "0.1"):
        with pytest.raises(MasConfigError, match=r"^mas\.max_logprob_gap must be a number > 0 or null"):
            mas(max_logprob_gap=bad)


def test_lora_per_role_keys():
    assert not mas().lora_per_role
    config = mas(router="per_role", lora_per_role=True)
    assert config.lora_per_role and config.gpus_per_policy(1) == {"tool": 1, "plan": 1}  # one group, shared GPUs
    with pytest.raises(MasConfigError, match=r"^mas\.lora_per_role: needs several policies"):
        mas(router="shared", lora_per_role=True)
    with pytest.raises(MasConfigError, match=r"^mas\.lora_per_role must be true or false, got 'yes'"):
        mas(router="per_role", lora_per_role="yes")
    with pytest.raises(MasConfigError, match=r"^mas\.policies\.plan: mas\.lora_per_role trains every policy"):
        mas(router="per_role", lora_per_role=True, policies={"plan": {"lora_rank": 8}})


def checked(overrides: list[str]) -> MasConfig:
    """`check_supported` on the composed `python -m verl_mas.main` config with `overrides`."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        config = compose("mas_trainer", overrides=overrides)
    mas_config = MasConfig.from_mapping(OmegaConf.to_container(config.mas, resolve=True))
    check_supported(config, mas_config)
    return mas_config


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            [],
            r"^actor_rollout_ref\.model\.lora_rank must be > 0 with mas\.lora_per_role \(each adapter's rank\), got 0",
        ),
        (
            ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora.merge=true"],
            r"^actor_rollout_ref\.model\.lora\.merge must be false with mas\.lora_per_role",
        ),
        (
            ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.rollout.name=sglang"],
            r"^actor_rollout_ref\.rollout\.name=sglang: ",
        ),
    ],
)
def test_lora_per_role_needs_a_lora_base_served_by_vllm(overrides, message):
    per_role = ["mas.router=per_role", "mas.lora_per_role=true"]
    assert checked([*per_role, "actor_rollout_ref.model.lora_rank=8"]).lora_per_role
    with pytest.raises(MasConfigError, match=message):
        checked([*per_role, *overrides])


def test_the_guard_needs_the_samplers_log_probs():
    no_log_probs = "actor_rollout_ref.rollout.calculate_log_probs=false"
    with pytest.raises(MasConfigError, match=r"^actor_rollout_ref\.rollout\.calculate_log_probs=false: the on-policy"):
        checked([no_log_probs])
    assert checked([no_log_probs, "mas.max_logprob_gap=null"]).max_logprob_gap is None


def test_a_reward_model_is_refused_at_start_since_the_environment_gives_every_reward():
    # verl-mas starts no reward-loop workers either (mas_defaults: reward.num_workers=0)
    for router in ("shared", "per_role"):
        with pytest.raises(MasConfigError, match=r"^reward\.reward_model\.enable=true: every reward comes from"):
            checked([f"mas.router={router}", "reward.reward_model.enable=true"])
    checked(["reward.reward_model.enable=false"])  # verl's default starts none: accepted
