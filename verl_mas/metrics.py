"""Rollout metrics: success, invalid moves, environment errors, and per role-and-turn group statistics."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from verl_mas.rollout import EpisodeResult


def rollout_metrics(results: Sequence[EpisodeResult], prefix: str = "rollout") -> dict[str, float]:
    """Flat metric dict. Per-(role, turn) keys: reward, team and local means, response length,
    mean within-group reward std, and the share of zero-variance groups (which carry no gradient)."""
    if not results:
        return {}
    samples = [s for r in results for s in r.samples]
    metrics: dict[str, float] = {
        f"{prefix}/success": float(np.mean([r.success for r in results])),
        f"{prefix}/turns": float(np.mean([r.turns for r in results])),
        f"{prefix}/team_reward_final": float(np.mean([r.team_reward for r in results])),
        f"{prefix}/env_errors": float(sum(r.error is not None for r in results)),
        f"{prefix}/samples": float(len(samples)),
        f"{prefix}/invalid_move_share": float(np.mean([not s.valid for s in samples])) if samples else 0.0,
    }
    groups: dict[tuple[str, str, int], list] = defaultdict(list)
    for s in samples:
        groups[s.group_key].append(s)
    by_role_turn: dict[tuple[str, int], list[list]] = defaultdict(list)
    for (_, role, turn), members in groups.items():
        by_role_turn[(role, turn)].append(members)
    all_stds = []
    for (role, turn), group_list in sorted(by_role_turn.items()):
        members = [s for g in group_list for s in g]
        stds = [float(np.std([s.reward for s in g])) for g in group_list]
        all_stds += stds
        key = f"{prefix}/{role}/turn{turn}"
        metrics[f"{key}/reward"] = float(np.mean([s.reward for s in members]))
        metrics[f"{key}/team_reward"] = float(np.mean([s.team_reward for s in members]))
        metrics[f"{key}/local_reward"] = float(np.mean([s.local_reward for s in members]))
        metrics[f"{key}/response_length"] = float(np.mean([len(s.response_ids) for s in members]))
        metrics[f"{key}/group_reward_std"] = float(np.mean(stds))
        metrics[f"{key}/zero_variance_share"] = float(np.mean([sd == 0.0 for sd in stds]))
    if all_stds:
        metrics[f"{prefix}/group_reward_std"] = float(np.mean(all_stds))
        metrics[f"{prefix}/zero_variance_share"] = float(np.mean([sd == 0.0 for sd in all_stds]))
    return metrics
