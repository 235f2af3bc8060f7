"""The core on a scripted policy: one AT-GRPO batch, its tree and its advantages, printed."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from verl_mas.advantage import registered_estimator
from verl_mas.dataset import split_tasks
from verl_mas.env import make_env
from verl_mas.metrics import rollout_metrics
from verl_mas.overrides import apply_overrides
from verl_mas.rollout import EpisodeResult, RolloutConfig, rollout_tasks
from verl_mas.router import PolicyRouter
from verl_mas.sample import samples_to_tensors
from verl_mas.scripted import ExpertMixPolicy


@dataclass(frozen=True)
class DemoConfig:
    env: str = "plan_path"
    env_options: Mapping[str, Any] = field(
        default_factory=lambda: {"size": 6, "wall_ratio": 0.2, "tool_mode": "compact"}
    )
    tasks: int = 8
    k: int = 4
    alpha: float = 1.0
    skill: float = 0.4
    seed: int = 0
    router: str = "per_role"


def demo_config(overrides: Mapping[str, Any]) -> DemoConfig:
    """The demo's config with `overrides`; another `env` starts from no env options (the default's are Plan-Path's)."""
    overrides = dict(overrides)
    config = DemoConfig()
    if overrides.get("env", config.env) != config.env:
        config = dataclasses.replace(config, env=overrides.pop("env"), env_options={})
    return apply_overrides(config, overrides)


def run_demo(config: DemoConfig) -> tuple[list[EpisodeResult], dict[str, float]]:
    roles = make_env(config.env, **config.env_options).workflow().roles
    router = PolicyRouter.from_spec(config.router, roles)
    tasks = split_tasks(config.env, "train", config.tasks, config.seed, config.env_options)
    rollout = RolloutConfig(k=config.k, alpha=config.alpha, with_expert=True)
    results = asyncio.run(rollout_tasks(tasks, ExpertMixPolicy(config.skill, config.seed), router, rollout))
    return results, rollout_metrics(results)


def format_demo(results: list[EpisodeResult], metrics: dict[str, float]) -> str:
    samples = [s for r in results for s in r.samples]
    tensors = samples_to_tensors(samples, pad_token_id=0)
    advantages, _ = registered_estimator()(
        token_level_rewards=tensors.token_level_rewards,
        response_mask=tensors.response_mask,
        config=None,
        index=tensors.uid,
        role=tensors.role,
        turn=tensors.turn,
    )
    first_token_adv = advantages[:, 0].tolist()
    first = results[0]
    lines = [
        f"Tree of {first.task.uid} (env {first.task.env}, seed {first.task.seed}); * marks the branch that continued",
        "",
    ]
    lines.append(f"{'turn':>4} {'role':<6} {'k':>2} {'team':>6} {'local':>6} {'reward':>7} {'adv':>7}  move")
    for i, s in enumerate(samples[: len(first.samples)]):
        move = s.text.replace("\n", " ")[:48]
        mark = "*" if s.continued else " "
        lines.append(
            f"{s.turn:>4} {s.role:<6} {s.branch:>2}{mark}{s.team_reward:>6.2f} {s.local_reward:>6.2f} "
            f"{s.reward:>7.3f} {first_token_adv[i]:>7.3f}  {move}"
        )
    lines += ["", f"episode: success={first.success} turns={first.turns} error={first.error}", "", "Batch metrics:"]
    lines += [f"  {k:<48} {v:.4f}" for k, v in metrics.items() if k.count("/") == 1]
    return "\n".join(lines)
