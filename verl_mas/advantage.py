"""The `at_grpo` advantage estimator: group-normalised rewards per (task, role, turn)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, get_args

import numpy as np
import torch

ESTIMATOR_NAME = "at_grpo"
# How samples are grouped for the advantage: AT-GRPO's (task, role, turn), or plain GRPO's task (the ablation).
Grouping = Literal["task_role_turn", "task"]
GROUPINGS: tuple[str, ...] = get_args(Grouping)


def compute_at_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | Sequence | None = None,
    config: Any = None,
    *,
    role: np.ndarray | Sequence | None = None,
    turn: np.ndarray | Sequence | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """AT-GRPO advantages, broadcast over each sample's response tokens.

    Args:
        token_level_rewards: [bs, L]; a sample's score is the sum of its row.
        response_mask: [bs, L]; advantages are zero outside it.
        index: [bs] task (or prompt) ids; None puts the whole batch in one group.
        config: verl's algorithm config; `norm_adv_by_std_in_grpo` is read from it when present.
        role: [bs] role names; with `turn`, groups are keyed (index, role, turn).
        turn: [bs] turn numbers.
        epsilon: added to the group std before dividing.
        norm_adv_by_std: divide by the group std; None reads the config, else True.

    Returns:
        (advantages, returns), equal, [bs, L]. Groups of one get mean 0 and std 1, as in verl's GRPO.

    Raises:
        ValueError: empty batch, mismatched shapes or lengths, non-finite rewards, role without turn.
    """
    scores_f64, mask = _validate(token_level_rewards, response_mask)
    n = scores_f64.shape[0]
    group = group_ids(n, index=index, role=role, turn=turn)
    if norm_adv_by_std is None:
        norm_adv_by_std = bool(_config_get(config, "norm_adv_by_std_in_grpo", True))

    with torch.no_grad():
        g = torch.from_numpy(group)
        num_groups = int(group.max()) + 1
        counts = torch.bincount(g, minlength=num_groups).to(torch.float64)
        means = torch.bincount(g, weights=scores_f64, minlength=num_groups) / counts
        squared_dev = torch.bincount(g, weights=(scores_f64 - means[g]) ** 2, minlength=num_groups)
        stds = torch.sqrt(squared_dev / (counts - 1).clamp(min=1.0))  # unbiased, like torch.std
        singleton = counts == 1
        means = torch.where(singleton, torch.zeros_like(means), means)
        stds = torch.where(singleton, torch.ones_like(stds), stds)
        centred = scores_f64 - means[g]
        scalars = centred / (stds[g] + epsilon) if norm_adv_by_std else centred
        advantages = scalars.to(token_level_rewards.dtype).unsqueeze(-1) * mask
    return advantages, advantages


def group_ids(
    n: int,
    *,
    index: np.ndarray | Sequence | None = None,
    role: np.ndarray | Sequence | None = None,
    turn: np.ndarray | Sequence | None = None,
) -> np.ndarray:
    """Dense int64 group ids (0..G-1) for key (index, role, turn), or index alone without role/turn."""
    if (role is None) != (turn is None):
        raise ValueError("at_grpo: pass both role and turn to group by (index, role, turn), or neither")
    columns = [index] if index is not None else [np.zeros(n, dtype=np.int64)]
    if role is not None:
        columns += [role, turn]
    combined = np.zeros(n, dtype=np.int64)
    for name, column in zip(("index", "role", "turn"), columns, strict=False):
        values = np.asarray(column, dtype=object if not isinstance(column, np.ndarray) else None).reshape(-1)
        if values.shape[0] != n:
            raise ValueError(f"at_grpo: {name} has {values.shape[0]} entries for a batch of {n}")
        codes, radix = _factorize(values)
        combined = combined * radix + codes
    return _factorize(combined)[0]


def _factorize(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes of `values` and how many distinct values there are (sort-based, no per-item loop)."""
    try:
        uniques, codes = np.unique(values, return_inverse=True)
    except TypeError:  # unorderable mixed types: compare by their text
        uniques, codes = np.unique(values.astype(str), return_inverse=True)
    return codes.reshape(-1).astype(np.int64, copy=False), max(len(uniques), 1)


def _validate(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(token_level_rewards, torch.Tensor) or token_level_rewards.dim() != 2:
        raise ValueError("at_grpo: token_level_rewards must be a 2-D tensor [batch, response_length]")
    if token_level_rewards.shape[0] == 0:
        raise ValueError("at_grpo: empty batch")
    if tuple(response_mask.shape) != tuple(token_level_rewards.shape):
        raise ValueError(
            f"at_grpo: response_mask shape {tuple(response_mask.shape)} != "
            f"token_level_rewards shape {tuple(token_level_rewards.shape)}"
        )
    scores = token_level_rewards.detach().to(torch.float64).sum(dim=-1)
    bad = ~torch.isfinite(scores)
    if bad.any():
        rows = torch.nonzero(bad).flatten()[:5].tolist()
        raise ValueError(f"at_grpo: non-finite (NaN/inf) rewards in rows {rows}")
    return scores, response_mask.to(token_level_rewards.dtype)


def _config_get(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    if hasattr(config, "get"):
        value = config.get(key, default)
    else:
        value = getattr(config, key, default)
    return default if value is None else value
