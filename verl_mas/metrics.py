"""Rollout metrics: success, invalid moves, environment errors, infrastructure failures, and per role-and-turn group
statistics."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from verl_mas.rollout import EpisodeResult
from verl_mas.sample import Sample, trainable


def rollout_metrics(results: Sequence[EpisodeResult], prefix: str = "rollout") -> dict[str, float]:
    """Flat metric dict. Overall, per role and per (role, turn): reward, team and local means, response length,
    invalid-move share, mean within-group reward std, and the share of zero-variance groups (no gradient); the
    sample statistics are over the samples that train (one the judge could not run has no real score)."""
    if not results:
        return {}
    samples = trainable([s for r in results for s in r.samples])
    metrics: dict[str, float] = {
        f"{prefix}/success": float(np.mean([r.success for r in results])),
        f"{prefix}/turns": float(np.mean([r.turns for r in results])),
        f"{prefix}/team_reward_final": float(np.mean([r.team_reward for r in results])),
        f"{prefix}/env_errors": float(sum(r.error is not None for r in results)),
        f"{prefix}/samples": float(len(samples)),
        f"{prefix}/invalid_move_share": float(np.mean([not s.valid for s in samples])) if samples else 0.0,
    }
    if samples:
        metrics[f"{prefix}/reward"] = float(np.mean([s.reward for s in samples]))
        metrics[f"{prefix}/response_length"] = float(np.mean([len(s.response_ids) for s in samples]))
    groups: dict[tuple[str, str, int], list] = defaultdict(list)
    for s in samples:
        groups[s.group_key].append(s)
    by_role: dict[str, list[list]] = defaultdict(list)
    for (_, role, _), members in groups.items():
        by_role[role].append(members)
    for (role, turn), stats in role_turn_stats(results).items():
        metrics |= {f"{prefix}/{role}/turn{turn}/{name}": value for name, value in stats.items()}
    for role, group_list in sorted(by_role.items()):
        metrics |= {f"{prefix}/{role}/{name}": value for name, value in _group_stats(group_list).items()}
    if groups:
        stds = [float(np.std([s.reward for s in g])) for g in groups.values()]
        metrics[f"{prefix}/group_reward_std"] = float(np.mean(stds))
        metrics[f"{prefix}/zero_variance_share"] = float(np.mean([sd == 0.0 for sd in stds]))
    return metrics


INFRA_FAILURES = "mas/infra_failures"


class InfraFailureLimit(RuntimeError):
    """More of a step's samples than allowed could not be judged: the sandbox or the judge is failing, not the model."""


def infra_failure_metrics(failures: int, samples: int, max_share: float, key: str) -> dict[str, float]:
    """`mas/infra_failures` (samples the judge could not run, left out of training) for one step of `samples`.

    Raises:
        InfraFailureLimit: failures are more than `max_share` of the samples; `key` names the setting.
    """
    if samples and failures / samples > max_share:
        raise InfraFailureLimit(
            f"{failures} of {samples} samples could not be judged (the sandbox or the judge failed, not the model: "
            f"see the samples' infra_failure), more than {key} = {max_share}; fix the host or raise {key}"
        )
    return {INFRA_FAILURES: float(failures)}


def role_turn_stats(results: Sequence[EpisodeResult]) -> dict[tuple[str, int], dict[str, float]]:
    """Per (role, turn), in sorted order: the statistics of its samples and of its (task, role, turn) groups."""
    by_role_turn: dict[tuple[str, int], dict[str, list[Sample]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        for s in trainable(result.samples):
            by_role_turn[(s.role, s.turn)][s.task_uid].append(s)
    return {key: _group_stats(list(groups.values())) for key, groups in sorted(by_role_turn.items())}


def _group_stats(group_list: list[list[Sample]]) -> dict[str, float]:
    members = [s for g in group_list for s in g]
    stds = [float(np.std([s.reward for s in g])) for g in group_list]
    return {
        "samples": float(len(members)),
        "reward": float(np.mean([s.reward for s in members])),
        "team_reward": float(np.mean([s.team_reward for s in members])),
        "local_reward": float(np.mean([s.local_reward for s in members])),
        "response_length": float(np.mean([len(s.response_ids) for s in members])),
        "invalid_move_share": float(np.mean([not s.valid for s in members])),
        "group_reward_std": float(np.mean(stds)),
        "zero_variance_share": float(np.mean([sd == 0.0 for sd in stds])),
    }
