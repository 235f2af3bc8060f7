"""The local training run: tokenizer, tiny or loaded models, expert warm start, AT-GRPO steps, evaluation."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from verl_mas.advantage import compute_at_grpo_advantage
from verl_mas.dataset import split_tasks
from verl_mas.env import Message, Task, make_env
from verl_mas.local.generator import BatchingGenerator, PolicyModel, SamplingConfig
from verl_mas.local.model import build_tiny_model, load_model
from verl_mas.local.tokenizer import load_tokenizer, train_tokenizer
from verl_mas.local.update import PolicyTrainer, UpdateConfig
from verl_mas.metrics import rollout_metrics
from verl_mas.rollout import EpisodeResult, Generation, GenerationRequest, RolloutConfig, rollout_tasks
from verl_mas.router import PolicyRouter
from verl_mas.sample import Sample, samples_to_tensors

Grouping = Literal["task_role_turn", "task"]
WARM_START_FIRST_INDEX = 10**6  # expert episodes use train boards far past those the RL steps reach


@dataclass(frozen=True)
class ModelSpec:
    """A model per policy: loaded from `path` (any HF causal LM), or tiny and random when path is empty."""

    path: str = ""
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    vocab_size: int = 768
    max_positions: int = 1024


@dataclass(frozen=True)
class WarmStartConfig:
    """Supervised warm start on the environment's expert moves (tiny models start from random weights)."""

    tasks: int = 256
    epochs: int = 4
    lr: float = 3e-3
    batch_size: int = 32


@dataclass(frozen=True)
class LocalTrainConfig:
    """Everything a local run needs; every field can be overridden on the command line as key=value."""

    env: str = "plan_path"
    env_options: Mapping[str, Any] = field(
        default_factory=lambda: {"size": 5, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 3}
    )
    router: Any = "shared"
    k: int = 4
    alpha: float = 1.0
    grouping: Grouping = "task_role_turn"
    tasks_per_step: int = 16
    steps: int = 30
    eval_tasks: int = 64
    eval_every: int = 10
    seed: int = 0
    output_dir: str = "runs/default"
    checkpoint_every: int = 0
    model: ModelSpec = field(default_factory=ModelSpec)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=1.0, max_new_tokens=24))
    update: UpdateConfig = field(default_factory=lambda: UpdateConfig(lr=3e-4, weight_decay=0.0))

    def __post_init__(self) -> None:
        if self.grouping not in ("task_role_turn", "task"):
            raise ValueError(f"grouping must be 'task_role_turn' or 'task', got {self.grouping!r}")
        if self.update.temperature != self.sampling.temperature:
            raise ValueError(
                f"update.temperature ({self.update.temperature}) must equal sampling.temperature "
                f"({self.sampling.temperature}): training must score the distribution that was sampled"
            )
        for key in ("k", "tasks_per_step", "eval_tasks", "eval_every"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.steps < 0 or self.checkpoint_every < 0:
            raise ValueError("steps and checkpoint_every must be >= 0")


@dataclass
class TrainSummary:
    """The numbers a run ends with."""

    eval_success_before: float
    eval_success_after: float
    steps: int
    output_dir: Path
    history: list[dict[str, float]]


def make_tasks(config: LocalTrainConfig, split: Literal["train", "eval"], start: int, count: int) -> list[Task]:
    """Tasks `start`..`start+count-1` of a split: the same seed always gives the same boards."""
    return split_tasks(config.env, split, count, config.seed, config.env_options, start)


class ExpertRecorder:
    """A `Generate` that answers with the expert's move and records (policy, prompt, move) for the warm start."""

    def __init__(self) -> None:
        self.pairs: list[tuple[str, tuple[Message, ...], str]] = []

    async def __call__(self, request: GenerationRequest) -> list[Generation]:
        if request.expert is None:
            raise ValueError(f"the environment gives no expert move for {request.request_id}: no warm start possible")
        self.pairs.append((request.policy, request.messages, request.expert))
        return [Generation(text=request.expert, prompt_ids=(), response_ids=())] * request.n


def collect_expert_pairs(config: LocalTrainConfig, router: PolicyRouter) -> list[tuple[str, tuple[Message, ...], str]]:
    """Expert moves along expert episodes on training boards (never evaluation ones)."""
    recorder = ExpertRecorder()
    tasks = make_tasks(config, "train", WARM_START_FIRST_INDEX, config.warm_start.tasks)
    asyncio.run(rollout_tasks(tasks, recorder, router, RolloutConfig(k=1, with_expert=True)))
    return recorder.pairs


def render_prompt(tokenizer, messages: tuple[Message, ...]) -> list[int]:
    return list(
        tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, return_dict=False)
    )


def warm_start(
    model: torch.nn.Module, tokenizer, pairs: list[tuple[tuple[Message, ...], str]], config: WarmStartConfig, seed: int
) -> float:
    """Cross-entropy on the expert's response tokens (prompt tokens masked); returns the last epoch's mean loss."""
    examples = []
    for messages, move in pairs:
        prompt = render_prompt(tokenizer, messages)
        response = tokenizer.encode(move, add_special_tokens=False) + [tokenizer.eos_token_id]
        examples.append((prompt, response))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr, weight_decay=0.0)
    order_rng = random.Random(seed)
    model.train()
    last_losses: list[float] = []
    for _ in range(config.epochs):
        order_rng.shuffle(examples)
        last_losses = []
        for start in range(0, len(examples), config.batch_size):
            batch = examples[start : start + config.batch_size]
            input_ids, attention_mask, labels = _pack_sft(batch, tokenizer.pad_token_id)
            loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            last_losses.append(loss.item())
    return float(np.mean(last_losses)) if last_losses else 0.0


def _pack_sft(batch: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(p) + len(r) for p, r in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for i, (prompt, response) in enumerate(batch):
        sequence = prompt + response
        input_ids[i, : len(sequence)] = torch.tensor(sequence)
        attention_mask[i, : len(sequence)] = 1
        labels[i, len(prompt) : len(sequence)] = torch.tensor(response)
    return input_ids, attention_mask, labels


def sample_advantages(samples: list[Sample], grouping: Grouping) -> torch.Tensor:
    """One scalar advantage per sample, grouped by (task, role, turn) or, for the ablation, by task only."""
    rewards = torch.tensor([[s.reward] for s in samples], dtype=torch.float32)
    ones = torch.ones_like(rewards)
    index = np.array([s.task_uid for s in samples], dtype=object)
    if grouping == "task":
        advantages, _ = compute_at_grpo_advantage(rewards, ones, index)
    else:
        role = np.array([s.role for s in samples], dtype=object)
        turn = np.array([s.turn for s in samples], dtype=np.int64)
        advantages, _ = compute_at_grpo_advantage(rewards, ones, index, role=role, turn=turn)
    return advantages[:, 0]


class LocalRun:
    """One local training run's state: models, trainers, generators, and its output folder."""

    def __init__(self, config: LocalTrainConfig, log: Callable[[str], None] = print) -> None:
        self.config = config
        self.log = log
        self.out = Path(config.output_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        random.seed(config.seed)
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
        roles = make_env(config.env, **config.env_options).workflow().roles
        self.router = PolicyRouter.from_spec(config.router, roles)
        pairs = collect_expert_pairs(config, self.router)
        self.tokenizer = self._tokenizer(pairs)
        self.models = {policy: self._model(i) for i, policy in enumerate(self.router.policies)}
        if not config.model.path:
            for policy, model in self.models.items():
                own = [(messages, move) for p, messages, move in pairs if p == policy]
                loss = warm_start(model, self.tokenizer, own, config.warm_start, config.seed)
                self.log(f"warm start {policy}: {len(own)} expert moves, final loss {loss:.3f}")
        self.trainers = {policy: PolicyTrainer(model, config.update) for policy, model in self.models.items()}
        served = {policy: PolicyModel(model, self.tokenizer) for policy, model in self.models.items()}
        self.sampler = BatchingGenerator(served, config.sampling, seed=config.seed)
        greedy = dataclasses.replace(config.sampling, greedy=True)
        self.evaluator = BatchingGenerator(served, greedy, seed=config.seed)

    def _tokenizer(self, pairs):
        if self.config.model.path:
            return load_tokenizer(self.config.model.path)
        texts = [m["content"] for _, messages, _ in pairs for m in messages] + [move for _, _, move in pairs]
        return train_tokenizer(texts, vocab_size=self.config.model.vocab_size)

    def _model(self, index: int) -> torch.nn.Module:
        spec = self.config.model
        if spec.path:
            return load_model(spec.path)
        return build_tiny_model(
            vocab_size=len(self.tokenizer),
            hidden=spec.hidden,
            layers=spec.layers,
            heads=spec.heads,
            max_positions=spec.max_positions,
            seed=self.config.seed + index,
            pad_token_id=self.tokenizer.pad_token_id,
            bos_token_id=self.tokenizer.bos_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
        )

    def evaluate(self) -> tuple[float, dict[str, float]]:
        """Success on the evaluation split: K = 1, greedy, independent rollouts."""
        tasks = make_tasks(self.config, "eval", 0, self.config.eval_tasks)
        results = asyncio.run(rollout_tasks(tasks, self.evaluator, self.router, RolloutConfig(k=1)))
        metrics = rollout_metrics(results, prefix="eval")
        return metrics["eval/success"], metrics

    def train_step(self, step: int) -> dict[str, float]:
        config = self.config
        started = time.perf_counter()
        tasks = make_tasks(config, "train", step * config.tasks_per_step, config.tasks_per_step)
        results: list[EpisodeResult] = asyncio.run(
            rollout_tasks(tasks, self.sampler, self.router, RolloutConfig(k=config.k, alpha=config.alpha))
        )
        rollout_s = time.perf_counter() - started
        samples = [s for r in results for s in r.samples]
        metrics = rollout_metrics(results)
        if not samples:
            return metrics | {"time/rollout_s": rollout_s}
        advantages = sample_advantages(samples, config.grouping)
        started = time.perf_counter()
        by_policy: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(samples):
            by_policy[s.policy].append(i)
        for policy, rows in by_policy.items():
            tensors = samples_to_tensors([samples[i] for i in rows], pad_token_id=self.tokenizer.pad_token_id)
            token_advantages = advantages[rows].unsqueeze(-1) * tensors.response_mask
            update = self.trainers[policy].step(tensors, token_advantages)
            metrics |= {f"update/{policy}/{k}": v for k, v in update.items()}
        metrics["time/rollout_s"] = rollout_s
        metrics["time/update_s"] = time.perf_counter() - started
        return metrics


def train(config: LocalTrainConfig, log: Callable[[str], None] = print) -> TrainSummary:
    """Warm start, evaluate, run `config.steps` AT-GRPO steps (evaluating every `eval_every`), evaluate again."""
    run = LocalRun(config, log)
    (run.out / "config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2, default=str))
    before, _ = run.evaluate()
    log(f"eval success before RL: {before:.3f}")
    history: list[dict[str, float]] = [{"step": 0, "eval/success": before}]
    metrics_file = run.out / "metrics.jsonl"
    with metrics_file.open("w") as sink:
        sink.write(json.dumps(history[0]) + "\n")
        for step in range(config.steps):
            metrics = {"step": step + 1} | run.train_step(step)
            if (step + 1) % config.eval_every == 0 or step + 1 == config.steps:
                started = time.perf_counter()
                metrics["eval/success"] = run.evaluate()[0]
                metrics["time/eval_s"] = time.perf_counter() - started
            history.append(metrics)
            sink.write(json.dumps(metrics) + "\n")
            sink.flush()
            shown = f" eval={metrics['eval/success']:.3f}" if "eval/success" in metrics else ""
            log(f"step {step + 1}/{config.steps} train success={metrics.get('rollout/success', 0):.3f}{shown}")
    after = history[-1].get("eval/success", before)
    plot_learning_curve(history, run.out / "learning_curve.png")
    return TrainSummary(before, after, config.steps, run.out, history)


def plot_learning_curve(history: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    train = [(h["step"], h["rollout/success"]) for h in history if "rollout/success" in h]
    evals = [(h["step"], h["eval/success"]) for h in history if "eval/success" in h]
    if train:
        ax.plot(*zip(*train, strict=True), label="train (tree rollout)", alpha=0.6)
    if evals:
        ax.plot(*zip(*evals, strict=True), marker="o", label="held-out (greedy, K=1)")
    ax.set_xlabel("step")
    ax.set_ylabel("success")
    ax.set_ylim(-0.02, 1.02)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
