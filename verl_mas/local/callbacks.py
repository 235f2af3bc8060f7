"""Public hooks on a local run: callbacks that observe its rollouts, advantages and steps, and may add metrics.

A study passes a list of `RunCallbacks` to `train(config, callbacks=[...])` (or `LocalRun(config, callbacks=[...])`)
instead of replacing the engine's functions. The events of a run, in order:

- `started(run, step)`: the run's folder is ready and nothing is evaluated yet (`step`: 0, or the resumed one);
- `rollout(run, prefix, results)`: after every rollout whose metrics the run records (`prefix` "eval" and
  "eval_sampled" at an evaluation, "rollout" at a training step); `results` hold the samples and, aligned with them,
  the environment's `info` of every move (`EpisodeResult.move_infos`);
- `advantages(run, step, samples, advantages)`: a training step's trainable samples and their advantages, before
  the update (`step` is 0-based, as `LocalRun.train_step`'s);
- `step_end(run, step, metrics)`: a training step's whole row (its evaluation included), before it is written.

`rollout` and `step_end` may return metrics to add to the row: a key the row already holds is an error, so a
callback never overwrites what the engine measured. A run without callbacks computes and writes exactly what it did
before they existed.

The verl engine's extension point is another: `verl_mas.verl_engine.hooks.TrainerHook`. Its events are verl's
per-policy phases (log-probs, update) on TransferQueue rows, in the trainer's Ray process, and it adds no metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from verl_mas.env import Task
from verl_mas.local.config import LocalTrainConfig, RolloutMode
from verl_mas.local.generator import BatchingGenerator, PolicyModel
from verl_mas.rollout import EpisodeResult
from verl_mas.sample import Sample


class ObservedRun(Protocol):
    """What a callback may use of the run it observes: `verl_mas.local.train.LocalRun` is the one (declared here, so
    that the callbacks the run imports need not import the run)."""

    config: LocalTrainConfig
    out: Path
    tokenizer: Any  # the run's Hugging Face tokenizer
    models: dict[str, torch.nn.Module]
    served: dict[str, PolicyModel]

    def rollout(
        self, tasks: list[Task], generator: BatchingGenerator, k: int, mode: RolloutMode
    ) -> list[EpisodeResult]: ...

    def evaluate(self) -> tuple[float, dict[str, float]]: ...

    def train_step(self, step: int) -> dict[str, float]: ...


class RunCallbacks:
    """A local run's event handlers, called in the run's own process; each does nothing unless overridden (see the
    module's docstring)."""

    def started(self, run: ObservedRun, step: int) -> None:
        """The run starts (or resumes) at training step `step`."""

    def rollout(self, run: ObservedRun, prefix: str, results: Sequence[EpisodeResult]) -> Mapping[str, float]:
        """A rollout the run records under `prefix`; returns metrics to add next to its own."""
        return {}

    def advantages(self, run: ObservedRun, step: int, samples: Sequence[Sample], advantages: torch.Tensor) -> None:
        """Training step `step`'s samples and their [N] advantages (read them; the update uses them as given)."""

    def step_end(self, run: ObservedRun, step: int, metrics: Mapping[str, float]) -> Mapping[str, float]:
        """Training step `step`'s metrics row; returns metrics to add to it."""
        return {}


def add_metrics(metrics: dict[str, float], extra: Mapping[str, float], callback: RunCallbacks) -> None:
    """Add a callback's `extra` metrics to `metrics`; a key already there is an error naming the callback."""
    taken = sorted(set(extra) & set(metrics))
    if taken:
        raise ValueError(f"{type(callback).__name__} returned metrics the run already has: {', '.join(taken)}")
    metrics.update(extra)
