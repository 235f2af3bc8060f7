"""The on-policy guard: each role's sampled tokens must have been served by the weights (and LoRA adapter) its policy
trains, which shows as the sampler's log-probs agreeing with the actor's recompute; a role past the bound stops the
run, naming it."""

from __future__ import annotations

from collections import defaultdict

import torch

from verl_mas.verl_engine.batch import SampleTags


class OffPolicyRollout(RuntimeError):
    """A role's rollout log-probs disagree with its policy's recompute: the server sampled it with other weights
    (the base model, another role's adapter, a stale adapter)."""


def logprob_gaps(
    tags: SampleTags, rollout_log_probs: torch.Tensor, actor_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> dict[tuple[str, str], float]:
    """Mean |sampler log-prob - actor's recomputed log-prob| over the response tokens of each (policy, role), from a
    step's padded [rows, response length] tensors; padding rows and rows the judge could not run are left out, and a
    (policy, role) without a response token has no entry."""
    gap = (rollout_log_probs.double() - actor_log_probs.double()).abs()
    sums: dict[tuple[str, str], float] = defaultdict(float)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for i in range(len(tags.padding)):
        if not tags.trained[i]:
            continue
        tokens = response_mask[i].bool()
        if not tokens.any():
            continue
        key = (str(tags.policy[i]), str(tags.role[i]))
        sums[key] += float(gap[i][tokens].sum())
        counts[key] += int(tokens.sum())
    return {key: sums[key] / counts[key] for key in sums}


def check_on_policy(gaps: dict[tuple[str, str], float], bound: float | None, *, adapters: bool = False) -> None:
    """Raise `OffPolicyRollout` naming every (policy, role) whose mean gap exceeds `bound` (None: the guard is off).

    Args:
        gaps: `logprob_gaps` of one step.
        bound: `mas.max_logprob_gap`.
        adapters: the policies are LoRA adapters of one base model (`mas.lora_per_role`): the message names them so.
    """
    if bound is None:
        return
    over = {key: gap for key, gap in sorted(gaps.items()) if not gap <= bound}  # a NaN gap fails too
    if not over:
        return
    what = "adapter" if adapters else "policy"
    found = ", ".join(f"role {role!r} ({what} {policy!r}): {gap:.4g}" for (policy, role), gap in over.items())
    raise OffPolicyRollout(
        f"on-policy guard: the sampler's log-probs disagree with the actor's recompute by more than "
        f"mas.max_logprob_gap={bound} (mean |difference| per response token) for {found}; the rollout was not served "
        f"by the weights this {what} trains (the base model, another {what}, stale weights)"
    )


def gap_metrics(gaps: dict[tuple[str, str], float]) -> dict[str, float]:
    """`mas/<role>/logprob_gap` per role (a role belongs to one policy)."""
    return {f"mas/{role}/logprob_gap": gap for (_, role), gap in gaps.items()}
