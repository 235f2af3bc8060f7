"""The `at_grpo` advantage estimator: group-normalised rewards, grouped by (task, role, turn), (task, role) or task."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, cast, get_args

import numpy as np
import torch

from verl_mas import ESTIMATOR

# How samples are grouped for the advantage, finest first: AT-GRPO's (task, role, turn); (task, role), one group per
# agent and task (per-agent normalisation, as Dr. MAS does); plain GRPO's task (every sample of a task in one group).
Grouping = Literal["task_role_turn", "task_role", "task"]
GROUPINGS: tuple[str, ...] = get_args(Grouping)
# The label columns each grouping keys its groups by, in order.
GROUPING_KEYS: dict[str, tuple[str, ...]] = {
    "task_role_turn": ("index", "role", "turn"),
    "task_role": ("index", "role"),
    "task": ("index",),
}
Labels = np.ndarray | Sequence


class GroupingError(ValueError):
    """A grouping that is not one of `GROUPINGS`; the message names the setting and the groupings there are."""


def check_grouping(grouping: object, key: str = "grouping") -> Grouping:
    """`grouping` itself when it is one of `GROUPINGS`; every engine, config and estimator call checks it here.

    Raises:
        GroupingError: anything else (another name, another case, padding, None, a number), naming `key`.
    """
    if not isinstance(grouping, str) or grouping not in GROUPINGS:
        raise GroupingError(f"{key}: unknown grouping {grouping!r}; use one of {list(GROUPINGS)}")
    return cast(Grouping, grouping)


def compute_at_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Labels | None = None,
    config: Any = None,
    *,
    role: Labels | None = None,
    turn: Labels | None = None,
    grouping: Grouping = "task_role_turn",
    epsilon: float = 1e-6,
    norm_adv_by_std: bool | None = None,
    reward_baselines: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """AT-GRPO advantages, broadcast over each sample's response tokens.

    `verl_mas.plugin` registers it in verl's estimator registry as `ESTIMATOR` (verl loads that plugin in every
    process), so a plain verl config selects it by name, and both engines call it through the registry as verl does.

    verl's dispatcher calls it as fn(token_level_rewards=, response_mask=, config=, index=); both engines add
    role=, turn= and grouping=.

    Args:
        token_level_rewards: [bs, L]; a sample's score is the sum of its row.
        response_mask: [bs, L]; advantages are zero outside it.
        index: [bs] task (or prompt) ids; None puts the whole batch in one group.
        config: verl's algorithm config; `norm_adv_by_std_in_grpo` is read from it when present.
        role: [bs] role names; passed together with `turn`.
        turn: [bs] turn numbers.
        grouping: "task_role_turn" keys groups (index, role, turn), "task_role" (index, role), "task" index alone.
            Without role and turn (verl's dispatcher passes only a uid) the index is the whole key at every level,
            so a caller of verl's `compute_advantage` picks the level by the uid it writes.
        epsilon: added to the group std before dividing.
        norm_adv_by_std: divide by the group std; None reads the config, else True.
        reward_baselines: verl's dispatcher passes them when the batch has some; unused (the baseline is the
            group mean).

    Returns:
        (advantages, returns), equal, [bs, L]. Groups of one get mean 0 and std 1, as in verl's GRPO.

    Raises:
        ValueError: empty batch, mismatched shapes or lengths, non-finite rewards, role without turn.
        GroupingError (a ValueError): unknown grouping.
    """
    scores = _validated_scores(token_level_rewards, response_mask)
    group = torch.from_numpy(group_ids(scores.shape[0], index=index, role=role, turn=turn, grouping=grouping))
    if norm_adv_by_std is None:
        norm_adv_by_std = bool(_config_get(config, "norm_adv_by_std_in_grpo", True))

    with torch.no_grad():
        g = group.to(scores.device)
        scores = scores.to(torch.float64)  # group statistics in float64: a small std amplifies rounding
        counts = torch.bincount(g).to(torch.float64)
        means = torch.bincount(g, weights=scores) / counts
        squared_dev = torch.bincount(g, weights=(scores - means[g]) ** 2)
        stds = torch.sqrt(squared_dev / (counts - 1).clamp(min=1.0))  # unbiased, like torch.std
        singleton = counts == 1
        means = torch.where(singleton, torch.zeros_like(means), means)
        stds = torch.where(singleton, torch.ones_like(stds), stds)
        centred = scores - means[g]
        scalars = centred / (stds[g] + epsilon) if norm_adv_by_std else centred
        mask = response_mask.to(token_level_rewards.dtype)
        advantages = scalars.to(token_level_rewards.dtype).unsqueeze(-1) * mask
    return advantages, advantages


def group_ids(
    n: int,
    *,
    index: Labels | None = None,
    role: Labels | None = None,
    turn: Labels | None = None,
    grouping: Grouping = "task_role_turn",
) -> np.ndarray:
    """Dense int64 group ids (0..G-1, in order of first appearance) of n samples under `grouping`.

    Raises:
        GroupingError: unknown grouping.
        ValueError: role without turn (or turn without role), a column whose length is not n.
    """
    check_grouping(grouping, f"{ESTIMATOR} grouping")
    if (role is None) != (turn is None):
        raise ValueError(f"{ESTIMATOR}: pass both role and turn to group by (index, role, turn), or neither")
    given = {"index": index, "role": role, "turn": turn}
    columns = {name: _as_array(name, values, n) for name, values in given.items() if values is not None}
    keys = GROUPING_KEYS[grouping]
    group, count = np.zeros(n, dtype=np.int64), 1
    for name in keys:
        if name in columns:
            codes, size = _factorize(columns[name])
            # The key so far and this column as one mixed-radix number, made dense again so that it stays below
            # n * n; while the key so far has one value, the column alone is the key.
            group, count = (codes, size) if count == 1 else _factorize(group * size + codes)
    return group


def registered_estimator() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """`at_grpo` as verl's estimator registry serves it, as a verl config selecting it would get it.

    Raises:
        RuntimeError: the estimator is not registered (verl's `verl.plugins` entry point did not load this package).
    """
    # Imported here: importing verl loads its plugins, and our plugin imports this module.
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    try:
        return get_adv_estimator_fn(ESTIMATOR)
    except ValueError as error:
        raise RuntimeError(
            f"{ESTIMATOR} is not in verl's estimator registry: the verl.plugins entry point verl_mas.plugin did "
            "not load (is VERL_USE_EXTERNAL_PLUGINS set? `python -c 'import verl_mas.plugin'` shows an import error)"
        ) from error


def _as_array(name: str, values: Labels, n: int) -> np.ndarray:
    # A list becomes an object array, so that "1" and 1 stay different labels instead of both turning into "1".
    array = (values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)).reshape(-1)
    if array.shape[0] != n:
        raise ValueError(f"{ESTIMATOR}: {name} has {array.shape[0]} entries for a batch of {n}")
    return array


def _factorize(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes of `values` and how many distinct values there are (a hash table: no sort, no per-item loop)."""
    # Imported on first use: verl's plugin loader imports this module in every Ray actor, and pandas is slow to import.
    import pandas as pd

    try:
        codes, uniques = pd.factorize(values, use_na_sentinel=False)
    except TypeError:  # unhashable labels (lists, dicts): compare by their text
        codes, uniques = pd.factorize(values.astype(str), use_na_sentinel=False)
    return codes.astype(np.int64, copy=False), max(len(uniques), 1)


def _validated_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[bs] row sums of the rewards, in their own dtype as verl sums them."""
    if not isinstance(token_level_rewards, torch.Tensor) or token_level_rewards.dim() != 2:
        raise ValueError(f"{ESTIMATOR}: token_level_rewards must be a 2-D tensor [batch, response_length]")
    if token_level_rewards.shape[0] == 0:
        raise ValueError(f"{ESTIMATOR}: empty batch")
    if tuple(response_mask.shape) != tuple(token_level_rewards.shape):
        raise ValueError(
            f"{ESTIMATOR}: response_mask shape {tuple(response_mask.shape)} != "
            f"token_level_rewards shape {tuple(token_level_rewards.shape)}"
        )
    scores = token_level_rewards.detach().sum(dim=-1)
    bad = ~torch.isfinite(scores)
    if bad.any():
        rows = torch.nonzero(bad).flatten()[:5].tolist()
        raise ValueError(f"{ESTIMATOR}: non-finite (NaN/inf) rewards in rows {rows}")
    return scores


def _config_get(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    if hasattr(config, "get"):
        value = config.get(key, default)
    else:
        value = getattr(config, key, default)
    return default if value is None else value
