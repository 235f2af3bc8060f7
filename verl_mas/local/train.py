"""The local training loop: a run's state, its AT-GRPO step, evaluation, checkpoints and resume, and `train`."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from verl_mas.advantage import Grouping, registered_estimator
from verl_mas.data_files import write_text_atomic
from verl_mas.dataset import split_tasks
from verl_mas.env import Task, make_env
from verl_mas.group_health import GroupHealthWarnings, coarser_metrics, sample_coarser_health, sample_group_health
from verl_mas.local.callbacks import RunCallbacks, add_metrics
from verl_mas.local.checkpoint import is_checkpoint, latest_checkpoint, load_checkpoint, save_checkpoint
from verl_mas.local.config import (
    CONFIG_FILE,
    LocalTrainConfig,
    RolloutMode,
    check_names,
    config_json,
    trains_warm_start,
)
from verl_mas.local.files import RunError, check_writable_dir, load_tensors, read_json
from verl_mas.local.generator import BatchingGenerator
from verl_mas.local.policies import build_policies, resolve_device
from verl_mas.local.reporting import MetricsSink, plot_learning_curve
from verl_mas.local.tokenizer import load_tokenizer
from verl_mas.local.warm_start import (
    check_warm_start_roles,
    collect_expert_pairs,
    expert_move_lengths,
    expert_tokenizer,
    warn_of_cut_moves,
)
from verl_mas.metrics import infra_failure_metrics, rollout_metrics
from verl_mas.rollout import (
    EnvFactory,
    EpisodeResult,
    RolloutConfig,
    default_env_factory,
    rollout_independent,
    rollout_tasks,
)
from verl_mas.router import PolicyRouter
from verl_mas.sample import Sample, samples_to_tensors, trainable

CHECKPOINT_DIR = "checkpoints"
TOKENIZER_DIR = "tokenizer"
GENERATORS_FILE = "generators.pt"
# Keys a resumed run may change without a note: they do not change what the next step computes.
RESUME_FREE_KEYS = (
    "steps",
    "resume",
    "progress",
    "tensorboard",
    "eval_every",
    "checkpoint_every",
    "output_dir",
    "device",
)
# Keys that decide what is built, so what a checkpoint's files must fit: the environment (its roles), the router (the
# policies), the models, the LoRA adapters, and whether each trainer keeps a reference model.
BUILD_KEYS = ("env", "env_options", "router", "model", "lora", "update.use_kl_loss")


@dataclass
class TrainSummary:
    """The numbers a run ends with."""

    eval_success_before: float
    eval_success_after: float
    steps: int
    # eval_sampled/success before and after (None without eval_samples)
    sampled_success_before: float | None
    sampled_success_after: float | None
    output_dir: Path
    history: list[dict[str, float]]


def make_tasks(config: LocalTrainConfig, split: Literal["train", "eval"], start: int, count: int) -> list[Task]:
    """Tasks `start`..`start+count-1` of a split: the same seed always gives the same boards."""
    return split_tasks(config.env, split, count, config.seed, config.env_options, start)


def sample_advantages(samples: list[Sample], grouping: Grouping, norm_adv_by_std: bool = True) -> torch.Tensor:
    """One scalar advantage per sample, from `at_grpo` as verl's registry serves it, under `grouping`; with
    `norm_adv_by_std` false, the rewards centred on their group's mean alone."""
    rewards = torch.tensor([[s.reward] for s in samples], dtype=torch.float32)
    advantages, _ = registered_estimator()(
        token_level_rewards=rewards,
        response_mask=torch.ones_like(rewards),
        config=None,
        index=np.array([s.task_uid for s in samples], dtype=object),
        role=np.array([s.role for s in samples], dtype=object),
        turn=np.array([s.turn for s in samples], dtype=np.int64),
        grouping=grouping,
        norm_adv_by_std=norm_adv_by_std,
    )
    return advantages[:, 0]


class LocalRun:
    """One local training run's state: models (or adapters), trainers, generators, and its output folder.

    With `checkpoint`, the tokenizer is read from it and no warm start runs: `load` then fills in the weights.
    `callbacks` observe its rollouts, advantages and steps (`verl_mas.local.callbacks`). Every training step logs the
    health of its advantage groups under `group_health/` and warns once per cause (`verl_mas.group_health`).
    """

    def __init__(
        self,
        config: LocalTrainConfig,
        log: Callable[[str], None] = print,
        checkpoint: Path | None = None,
        callbacks: Sequence[RunCallbacks] = (),
    ) -> None:
        require_estimator()
        self.config = config
        self.log = log
        self.callbacks = tuple(callbacks)
        self.out = Path(config.output_dir)
        self.device = resolve_device(config.device)
        random.seed(config.seed)
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
        roles = make_env(config.env, **config.env_options).workflow().roles
        check_warm_start_roles(config, roles)
        self.router = PolicyRouter.from_spec(config.router, roles)
        check_names(config, roles, self.router.policies)
        self.env_factory: EnvFactory = default_env_factory
        # Expert moves train a tiny model's tokenizer and feed the warm start: a model built from scratch always needs
        # them, loaded weights only when warm_start.tune_loaded asks for a tune.
        pairs = []
        if checkpoint is None and trains_warm_start(config):
            log(f"collecting expert moves on {config.warm_start.tasks} warm-start tasks")
            pairs = collect_expert_pairs(config, self.router)
        if checkpoint is not None:
            self.tokenizer = checkpoint_tokenizer(checkpoint)
        elif config.model.path:
            self.tokenizer = load_tokenizer(config.model.path)
        else:
            log(f"training a {config.model.vocab_size}-token tokenizer on {len(pairs)} expert moves and their prompts")
            self.tokenizer = expert_tokenizer(pairs, config.model.vocab_size)
        # per role, the expert moves' lengths: what a saved warm start tells the runs that start from it
        self.expert_move_lengths = expert_move_lengths(self.tokenizer, pairs)
        warn_of_cut_moves(self.expert_move_lengths, config.sampling, log)
        policies = build_policies(config, self.router.policies, self.tokenizer, pairs, self.device, log)
        self.models, self.trainers, self.served = policies.models, policies.trainers, policies.served
        sampler_seed = config.seed if config.sampler_seed is None else config.sampler_seed
        self.sampler = BatchingGenerator(self.served, config.sampling, seed=sampler_seed)
        greedy = dataclasses.replace(config.sampling, greedy=True)
        self.evaluator = BatchingGenerator(self.served, greedy, seed=config.seed)
        # Its own stream, restarted at every evaluation: evaluating never shifts the training samples, and every
        # evaluation draws with the same random numbers, so successive ones differ by the policy only.
        self.sampled_evaluator = BatchingGenerator(self.served, config.sampling, seed=config.seed + 1)
        self.sampled_evaluator_start = self.sampled_evaluator.rng_state()
        self.group_health_warnings = GroupHealthWarnings()

    def rollout(
        self, tasks: list[Task], generator: BatchingGenerator, k: int, mode: RolloutMode
    ) -> list[EpisodeResult]:
        """The tree rollout, or K independent episodes per task (the no-tree ablation, and sampled evaluation)."""
        rollout = rollout_tasks if mode == "tree" else rollout_independent
        rollout_config = RolloutConfig(k=k, alpha=self.config.alpha)
        results = asyncio.run(rollout(tasks, generator, self.router, rollout_config, self.env_factory))
        require_some_played(results)
        return results

    def evaluate(self) -> tuple[float, dict[str, float]]:
        """Success on the evaluation split: K = 1, greedy, independent rollouts; with `eval_samples`, also
        `eval_samples` sampled episodes per task under `eval_sampled/`."""
        tasks = make_tasks(self.config, "eval", 0, self.config.eval_tasks)
        metrics = self.rollout_metrics(self.rollout(tasks, self.evaluator, 1, "tree"), "eval")
        if self.config.eval_samples:
            self.sampled_evaluator.set_rng_state(self.sampled_evaluator_start)
            sampled = self.rollout(tasks, self.sampled_evaluator, self.config.eval_samples, "independent")
            metrics |= self.rollout_metrics(sampled, "eval_sampled")
        return metrics["eval/success"], metrics

    def rollout_metrics(self, results: list[EpisodeResult], prefix: str) -> dict[str, float]:
        """`rollout_metrics` of a recorded rollout, and what the callbacks' `rollout` events add to them."""
        metrics = rollout_metrics(results, prefix=prefix)
        for callback in self.callbacks:
            add_metrics(metrics, callback.rollout(self, prefix, results), callback)
        return metrics

    def train_step(self, step: int) -> dict[str, float]:
        config = self.config
        step_started = time.perf_counter()
        tasks = self.train_tasks(step)
        stats = self.sampler.stats
        sampling_before, serving_before = stats.sampling_s, stats.serving_s
        results = self.rollout(tasks, self.sampler, config.k, config.rollout_mode)
        sampling_s = stats.sampling_s - sampling_before
        timing = {
            "time/rollout_s": time.perf_counter() - step_started,
            "time/generation_s": sampling_s,
            "time/generator_overhead_s": stats.serving_s - serving_before - sampling_s,
        }
        rolled_out = [s for r in results for s in r.samples]
        samples = trainable(rolled_out)  # a sample the judge could not run is in no group and no update
        metrics = self.rollout_metrics(results, "rollout") | infra_failure_metrics(
            len(rolled_out) - len(samples), len(rolled_out), config.max_infra_failure_share, "max_infra_failure_share"
        )
        if samples:
            started = time.perf_counter()
            advantages = self.compute_advantages(samples)
            timing["time/advantage_s"] = time.perf_counter() - started
            for callback in self.callbacks:
                callback.advantages(self, step, samples, advantages)
            health = sample_group_health(samples, advantages, config.grouping, tree=config.rollout_mode == "tree")
            self.group_health_warnings.check(health, step=step + 1)
            coarser = sample_coarser_health(samples, config.grouping, config.norm_adv_by_std)
            metrics |= health.metrics() | coarser_metrics(coarser) | self._update(samples, advantages, timing)
        timing["time/step_s"] = time.perf_counter() - step_started
        return metrics | timing

    def train_tasks(self, step: int) -> list[Task]:
        """The tasks training step `step` (0-based) rolls out: the next `tasks_per_step` of the train split."""
        return make_tasks(self.config, "train", step * self.config.tasks_per_step, self.config.tasks_per_step)

    def compute_advantages(self, samples: list[Sample]) -> torch.Tensor:
        """[N] one advantage per sample, by the run's grouping."""
        return sample_advantages(samples, self.config.grouping, self.config.norm_adv_by_std)

    def _update(self, samples: list[Sample], advantages: torch.Tensor, timing: dict[str, float]) -> dict[str, float]:
        """One PolicyTrainer step per policy on its own samples; adds tensors_s and update_s to `timing`."""
        started = time.perf_counter()
        tensors_s = 0.0
        metrics: dict[str, float] = {}
        by_policy: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(samples):
            by_policy[s.policy].append(i)
        for policy, rows in by_policy.items():
            packing_started = time.perf_counter()
            tensors = samples_to_tensors([samples[i] for i in rows], pad_token_id=self.tokenizer.pad_token_id)
            token_advantages = advantages[rows].unsqueeze(-1) * tensors.response_mask
            tensors_s += time.perf_counter() - packing_started
            update = self.trainers[policy].step(tensors, token_advantages)
            metrics |= {f"update/{policy}/{k}": v for k, v in update.items()}
        timing["time/tensors_s"] = tensors_s
        timing["time/update_s"] = time.perf_counter() - started
        return metrics

    def save(self, step: int, history: list[dict[str, float]]) -> Path:
        """Checkpoint everything the next step depends on, and the tokenizer and config that rebuild the run."""

        def write_files(folder: Path) -> None:
            self.tokenizer.save_pretrained(str(folder / TOKENIZER_DIR))
            (folder / CONFIG_FILE).write_text(config_json(self.config))
            generators = {"sampler": self.sampler.rng_state(), "evaluator": self.evaluator.rng_state()}
            torch.save(generators, folder / GENERATORS_FILE)

        root = self.out / CHECKPOINT_DIR
        return save_checkpoint(root, step, self.models, self.trainers, {"history": history}, write_files)

    def load(self, path: Path) -> tuple[int, list[dict[str, float]]]:
        """Restore a checkpoint written by `save`; returns its step and the metrics history up to it.

        Weights or policies that do not fit what this config built are an error naming the settings that changed
        since the checkpoint's `config.json` (`model.hidden: saved 32, now 48`)."""
        generators = load_tensors(path / GENERATORS_FILE)
        explain = functools.partial(changed_build_keys, path, self.config)  # read only when loading fails
        loaded = load_checkpoint(path, self.models, self.trainers, explain=explain)
        self.sampler.set_rng_state(generators["sampler"])
        self.evaluator.set_rng_state(generators["evaluator"])
        return loaded.step, loaded.extra["history"]


def changed_build_keys(checkpoint: Path, config: LocalTrainConfig) -> str:
    """The settings that decide what a run builds (its policies, their models and adapters) on which `config`
    differs from the checkpoint's `config.json`, as `model.hidden: saved 32, now 48; ...`; "" when none differ or
    the saved config cannot be read."""
    try:
        saved = _flattened(saved_config(checkpoint))
    except ValueError:
        return ""
    current = _flattened(json.loads(config_json(config)))
    changed = [
        f"{key}: saved {_shown(saved, key)}, now {_shown(current, key)}"
        for key in sorted(saved.keys() | current.keys())
        if is_build_key(key) and saved.get(key, _ABSENT) != current.get(key, _ABSENT)
    ]
    return "; ".join(changed)


def is_build_key(key: str) -> bool:
    """Whether a dotted config key is, or sits under, one of BUILD_KEYS."""
    return any(key == build or key.startswith(f"{build}.") for build in BUILD_KEYS)


def _flattened(node: dict, prefix: str = "") -> dict[str, object]:
    """A nested config as {dotted key: value}."""
    flat: dict[str, object] = {}
    for key, value in node.items():
        if isinstance(value, dict) and value:
            flat |= _flattened(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


_ABSENT = object()


def _shown(flat: dict[str, object], key: str) -> str:
    return json.dumps(flat[key]) if key in flat else "(not set)"


def require_estimator() -> None:
    """`at_grpo` is in verl's estimator registry, checked before anything is built: a plugin that failed to register
    it is an error naming its exception now, not an unknown estimator after the warm start."""
    from verl_mas import plugin  # registers it in this process, also where verl's plugin loading is off

    try:
        plugin.require_registered((plugin.ESTIMATOR,))
    except RuntimeError as error:
        raise RunError(f"{error}; see `verl-mas doctor`") from None


def checkpoint_tokenizer(checkpoint: Path):
    """The tokenizer saved in a checkpoint; a missing or broken one is an error naming its folder."""
    folder = checkpoint / TOKENIZER_DIR
    if not folder.is_dir():
        raise ValueError(f"checkpoint {checkpoint} has no {TOKENIZER_DIR}/ folder")
    try:
        return load_tokenizer(folder)
    except (OSError, ValueError, TypeError, KeyError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"the tokenizer in {folder} cannot be loaded: {first}") from error


def saved_config(checkpoint: Path) -> dict:
    """The config a checkpoint was trained with, as its JSON object (read before anything is built)."""
    saved = read_json(checkpoint / CONFIG_FILE)
    if not isinstance(saved, dict):
        raise ValueError(f"{checkpoint / CONFIG_FILE} holds no config (a JSON object), but {type(saved).__name__}")
    return saved


def require_some_played(results: list[EpisodeResult]) -> None:
    """A batch whose every task the environment abandoned trains and measures nothing: stop instead of going on."""
    if results and all(result.error for result in results):
        raise RunError(
            f"every one of the {len(results)} tasks failed in the environment, so there is nothing to train or "
            f"evaluate on; the first error: {results[0].error}"
        )


def find_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory itself, else the latest under `path` or under `path/checkpoints` (a run's folder)."""
    path = Path(path)
    if is_checkpoint(path):
        return path
    for folder in (path, path / CHECKPOINT_DIR):
        found = latest_checkpoint(folder)
        if found is not None:
            return found
    raise ValueError(
        f"no checkpoint at {path} (neither a step_* checkpoint nor a folder holding one); a run writes checkpoints "
        "only with checkpoint_every=N (its default, 0, writes none)"
    )


def resume_checkpoint(config: LocalTrainConfig, log: Callable[[str], None]) -> Path | None:
    """The checkpoint `config.resume` asks for; resume=true with none under output_dir starts afresh."""
    if config.resume is False:
        return None
    if config.resume is True:
        found = latest_checkpoint(Path(config.output_dir) / CHECKPOINT_DIR)
        if found is None:
            log(f"resume: no checkpoint under {config.output_dir}/{CHECKPOINT_DIR}, starting afresh")
        return found
    return find_checkpoint(config.resume)


def train(
    config: LocalTrainConfig, log: Callable[[str], None] = print, callbacks: Sequence[RunCallbacks] = ()
) -> TrainSummary:
    """Warm start (or resume), evaluate, run AT-GRPO steps up to `config.steps` (evaluating every `eval_every`,
    checkpointing every `checkpoint_every` and at the end), and evaluate again; `callbacks` see every event
    (`verl_mas.local.callbacks`)."""
    check_writable_dir(Path(config.output_dir), "output_dir")
    checkpoint = resume_checkpoint(config, log)
    saved = saved_config(checkpoint) if checkpoint is not None else None
    run = LocalRun(config, log, checkpoint, callbacks)
    start = 0
    if checkpoint is not None:
        start, history = run.load(checkpoint)
    # Only now is the run known to start: a failed resume leaves the run's folder as it was.
    run.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run.out / CONFIG_FILE, config_json(config))
    for callback in run.callbacks:
        callback.started(run, start)
    if saved is None:
        log(f"evaluating before RL on {config.eval_tasks} tasks")
        started = time.perf_counter()
        before, before_metrics = run.evaluate()
        log(f"eval success before RL: {before:.3f}")
        history = [{"step": 0} | before_metrics | {"time/eval_s": time.perf_counter() - started}]
    else:
        log(f"resumed from {checkpoint} at step {start}")
        current = json.loads(config_json(config))
        changed = [k for k, v in current.items() if k not in RESUME_FREE_KEYS and saved.get(k) != v]
        if changed:
            log(f"resume: the checkpoint was trained with other {', '.join(changed)}: continuing with the new values")
    sink = MetricsSink(
        run.out, history, config.steps, tensorboard=config.tensorboard, progress=config.progress, log=log
    )
    try:
        for step in range(start, config.steps):
            metrics = {"step": step + 1} | run.train_step(step)
            last = step + 1 == config.steps
            if (step + 1) % config.eval_every == 0 or last:
                started = time.perf_counter()
                metrics |= run.evaluate()[1]
                metrics["time/eval_s"] = time.perf_counter() - started
            for callback in run.callbacks:
                add_metrics(metrics, callback.step_end(run, step, metrics), callback)
            history.append(metrics)
            sink.add(metrics)
            if config.checkpoint_every and ((step + 1) % config.checkpoint_every == 0 or last):
                run.save(step + 1, history)
    finally:
        sink.close()
    evals = [row["eval/success"] for row in history if "eval/success" in row]
    sampled = [row["eval_sampled/success"] for row in history if "eval_sampled/success" in row]
    plot_learning_curve(history, run.out / "learning_curve.png")
    return TrainSummary(
        eval_success_before=evals[0],
        eval_success_after=evals[-1],
        steps=config.steps,
        sampled_success_before=sampled[0] if sampled else None,
        sampled_success_after=sampled[-1] if sampled else None,
        output_dir=run.out,
        history=history,
    )
