"""The trainer's advantage step on one training step's TransferQueue rows: each row's own mixed reward restored as its
score, the on-policy guard, verl's in-reward KL and rollout correction, `at_grpo` advantages, and the health of the
step's advantage groups (and of the coarser groupings)."""

from __future__ import annotations

import torch
import transfer_queue as tq
from omegaconf import DictConfig
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import AdaptiveKLController, FixedKLController
from verl.trainer.ppo.ray_trainer import apply_kl_penalty
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.workers.utils.padding import response_to_nested

from verl_mas.group_health import GroupHealthWarnings, coarser_metrics
from verl_mas.verl_engine.batch import (
    SampleTags,
    at_grpo_advantages,
    batch_tags,
    infra_failures,
    prompt_codes_of,
    reward_scores,
    sample_metrics,
    step_coarser_health,
    step_group_health,
)
from verl_mas.verl_engine.config import MasConfig, MasConfigError
from verl_mas.verl_engine.guard import check_on_policy, gap_metrics, logprob_gaps

# what the step reads of each row
FIELDS = ["response_mask", "extra_fields", "rollout_log_probs", "old_log_probs", "ref_log_prob", "prompts"]


def compute_advantage_step(
    batch: KVBatchMeta,
    metrics: dict,
    *,
    algorithm: DictConfig,
    mas: MasConfig,
    kl_ctrl: AdaptiveKLController | FixedKLController | None,
    warnings: GroupHealthWarnings,
    step: int,
) -> KVBatchMeta:
    """Restore each row's mixed reward as its score, then `at_grpo` advantages grouped by `mas.grouping` (task, role,
    turn by default), written back to TransferQueue; the step's metrics and group health go to `metrics`.

    Args:
        algorithm: verl's `algorithm:` config (KL penalty, rollout correction, `norm_adv_by_std_in_grpo`).
        kl_ctrl: verl's in-reward KL controller; None when `algorithm.use_kl_in_reward` is off.
        warnings: the run's group-health warnings, each cause warned once (`step` names the step).

    Returns:
        the batch's metadata with the new fields listed, which each policy's update must fetch from.
    """
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=FIELDS)
    nested_mask = data["response_mask"]
    tags = batch_tags(data.pop("extra_fields"), batch.tags)
    prompt_codes = prompt_codes_of(data.pop("prompts"))
    metrics.update(infra_failures(tags, mas.max_infra_failure_share))  # stops the run past the share
    proto = DataProto(batch=data.to_padded_tensor())
    check_rows_on_policy(tags, proto, metrics, mas)
    scores = reward_scores(tags, nested_mask.offsets().diff(), proto.batch["response_mask"].shape[1])
    proto.batch["token_level_scores"] = scores
    if kl_ctrl is not None:
        proto, kl_metrics = apply_kl_penalty(proto, kl_ctrl=kl_ctrl, kl_penalty=algorithm.kl_penalty)
        metrics.update(kl_metrics)
    else:
        proto.batch["token_level_rewards"] = scores
    correction = algorithm.get("rollout_correction", None)
    corrected = (
        correction is not None and "rollout_log_probs" in proto.batch and not correction.get("bypass_mode", False)
    )
    if corrected:
        proto, correction_metrics = compute_rollout_correction_and_add_to_batch(proto, correction)
        metrics.update(correction_metrics)
    rewards, response_mask = proto.batch["token_level_rewards"], proto.batch["response_mask"]
    advantages = at_grpo_advantages(rewards, response_mask, tags, mas.grouping, algorithm)
    out = {"rm_scores": scores, "token_level_rewards": rewards}
    out["advantages"] = out["returns"] = advantages
    if corrected:
        out["response_mask"] = response_mask
        if "rollout_is_weights" in proto.batch:
            out["rollout_is_weights"] = proto.batch["rollout_is_weights"]
    if tags.infra_failure.any():  # as verl's padding rows: no token in the loss, its token count, entropy or KL
        out["response_mask"] = response_mask.clone()
        out["response_mask"][torch.from_numpy(tags.infra_failure)] = 0
    nested = TensorDict({k: response_to_nested(v, nested_mask) for k, v in out.items()}, batch_size=len(batch))
    metrics.update(sample_metrics(tags, mas.grouping))
    health = step_group_health(tags, rewards, advantages, response_mask, prompt_codes, mas.grouping)
    if health is not None:
        metrics.update(health.metrics())
        warnings.check(health, step=step)
    norm_adv_by_std = bool(algorithm.get("norm_adv_by_std_in_grpo", True))
    metrics.update(coarser_metrics(step_coarser_health(tags, rewards, prompt_codes, mas.grouping, norm_adv_by_std)))
    return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=nested)


def check_rows_on_policy(tags: SampleTags, proto: DataProto, metrics: dict, mas: MasConfig) -> None:
    """The on-policy guard (`mas.max_logprob_gap`): each role's sampler log-probs against its policy's recompute,
    logged as mas/<role>/logprob_gap; a role past the bound stops the run (`guard.OffPolicyRollout`)."""
    bound = mas.max_logprob_gap
    if "rollout_log_probs" not in proto.batch or "old_log_probs" not in proto.batch:
        if bound is None:
            return
        raise MasConfigError(
            "mas.max_logprob_gap: the step has no rollout_log_probs or old_log_probs to compare, so the on-policy "
            "guard cannot run; set mas.max_logprob_gap=null to run without it"
        )
    gaps = logprob_gaps(
        tags, proto.batch["rollout_log_probs"], proto.batch["old_log_probs"], proto.batch["response_mask"]
    )
    metrics.update(gap_metrics(gaps))
    check_on_policy(gaps, bound, adapters=mas.lora_per_role)
