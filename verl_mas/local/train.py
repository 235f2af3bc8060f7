"""The local training run: tokenizer, tiny or loaded models, expert warm start, AT-GRPO steps, evaluation."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import torch
from peft import LoraConfig, get_peft_model

from verl_mas.advantage import GROUPINGS, Grouping, registered_estimator
from verl_mas.dataset import split_tasks
from verl_mas.env import Message, Task, make_env
from verl_mas.local.checkpoint import is_checkpoint, latest_checkpoint, load_checkpoint, save_checkpoint
from verl_mas.local.generator import BatchingGenerator, PolicyModel, SamplingConfig
from verl_mas.local.logprob import sequence_logprobs
from verl_mas.local.model import build_tiny_model, load_model
from verl_mas.local.reporting import MetricsSink
from verl_mas.local.tokenizer import load_tokenizer, train_tokenizer
from verl_mas.local.update import PolicyTrainer, UpdateConfig
from verl_mas.metrics import rollout_metrics
from verl_mas.overrides import apply_overrides
from verl_mas.rollout import (
    EnvFactory,
    EpisodeResult,
    Generation,
    GenerationRequest,
    RolloutConfig,
    default_env_factory,
    rollout_independent,
    rollout_tasks,
)
from verl_mas.router import PolicyRouter
from verl_mas.sample import Sample, samples_to_tensors
from verl_mas.scripted import corrupt

RolloutMode = Literal["tree", "independent"]
CHECKPOINT_DIR = "checkpoints"
TOKENIZER_DIR = "tokenizer"
CONFIG_FILE = "config.json"
GENERATORS_FILE = "generators.pt"
LORA_BASE_MODEL = "base"  # the checkpoint name of the one model that carries every policy's adapter
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
Policies = tuple[dict[str, torch.nn.Module], dict[str, PolicyTrainer], dict[str, PolicyModel]]
WarmStartSchedule = Literal["cosine", "constant"]
WARM_START_SCHEDULES: tuple[str, ...] = get_args(WarmStartSchedule)
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

    tasks: int = 1024
    epochs: int = 6
    lr: float = 3e-3
    batch_size: int = 32
    # "cosine" decays the lr to zero over all warm-start batches; "constant" keeps it. Decay lets the last epochs
    # settle instead of bouncing around the minimum at the full lr.
    lr_schedule: WarmStartSchedule = "cosine"
    # Probability that the move played along a warm-start episode is the expert's (else a corrupted copy); the
    # label is always the expert's move. Below 1, the data also holds later turns and wrong proposals to fix.
    play_skill: float = 0.5
    # The roles whose played moves may be corrupted (None: every role); the others always play the expert's move.
    # With only the plan's moves corrupted, the tool's proposals stay right, so the data holds later turns whose
    # proposals are still worth copying.
    corrupt_roles: tuple[str, ...] | None = None
    # Env options of the warm-start boards only, merged over `env_options`: e.g. size=5 warm-starts on smaller boards
    # than RL and evaluation play, so that RL has harder boards left to learn.
    env_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.play_skill <= 1.0:
            raise ValueError(f"warm_start.play_skill must be in [0, 1], got {self.play_skill}")
        if self.corrupt_roles is not None and not (
            isinstance(self.corrupt_roles, tuple) and all(isinstance(role, str) for role in self.corrupt_roles)
        ):
            raise ValueError(f"warm_start.corrupt_roles must be a list of role names, got {self.corrupt_roles!r}")
        if self.lr_schedule not in WARM_START_SCHEDULES:
            raise ValueError(f"warm_start.lr_schedule must be one of {WARM_START_SCHEDULES}, got {self.lr_schedule!r}")


@dataclass(frozen=True)
class LoraSpec:
    """With rank > 0: one base model carrying one peft LoRA adapter per policy, instead of one whole model each.

    The base is warm-started on every policy's expert moves, then frozen; adapters start as the identity
    (peft zero-initialises B). No LoRA dropout: training must score the same function the sampler drew from.
    """

    rank: int = 0
    alpha: float = 16.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class LocalTrainConfig:
    """Everything a local run needs; every field can be overridden on the command line as key=value."""

    env: str = "plan_path"
    env_options: Mapping[str, Any] = field(
        default_factory=lambda: {
            "size": 5,
            "wall_ratio": 0.2,
            "tool_mode": "compact",
            "max_turns": 3,
            "brief_prompts": True,
        }
    )
    router: Any = "shared"
    k: int = 4
    alpha: float = 1.0
    grouping: Grouping = "task_role_turn"
    tasks_per_step: int = 16
    steps: int = 300
    eval_tasks: int = 256
    eval_every: int = 50
    # > 0: also evaluate the sampling policy itself (what RL trains): this many episodes per task at
    # sampling.temperature, as `eval_sampled/success`, next to greedy decoding's `eval/success`.
    eval_samples: int = 2
    seed: int = 0
    output_dir: str = "runs/default"
    checkpoint_every: int = 0
    model: ModelSpec = field(default_factory=ModelSpec)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=1.0, max_new_tokens=24))
    update: UpdateConfig = field(default_factory=lambda: UpdateConfig(lr=3e-4, weight_decay=0.0))
    # update.lr for the named policies instead (with router=per_role a policy is a role), so that one role's model
    # can learn at another rate than the rest: a role writing long programs breaks at rates others take.
    policy_lr: dict[str, float] = field(default_factory=dict)
    lora: LoraSpec = field(default_factory=LoraSpec)
    rollout_mode: RolloutMode = "tree"  # "independent": the no-tree ablation, K whole episodes per task
    resume: bool | str = False  # true: the latest checkpoint under output_dir, if any; a path: that checkpoint
    progress: bool = True  # a progress bar over steps; false: one log line per step
    tensorboard: bool = False  # also write the metrics as TensorBoard scalars to output_dir/tb
    # Where models, sampling and updates run: "cpu", "cuda", "cuda:N", or "auto" (cuda when available).
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.device != "auto":
            try:
                torch.device(self.device)
            except (RuntimeError, TypeError) as error:
                raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {self.device!r}") from error
        if self.rollout_mode not in ("tree", "independent"):
            raise ValueError(f"rollout_mode must be 'tree' or 'independent', got {self.rollout_mode!r}")
        if self.resume == "":
            raise ValueError("resume must be true, false or a checkpoint path, got an empty string")
        if self.lora.rank < 0:
            raise ValueError(f"lora.rank must be >= 0 (0: one whole model per policy), got {self.lora.rank}")
        if self.grouping not in GROUPINGS:
            raise ValueError(f"grouping must be one of {GROUPINGS}, got {self.grouping!r}")
        if self.update.temperature != self.sampling.temperature:
            raise ValueError(
                f"update.temperature ({self.update.temperature}) must equal sampling.temperature "
                f"({self.sampling.temperature}): training must score the distribution that was sampled"
            )
        for key in ("k", "tasks_per_step", "eval_tasks", "eval_every"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        for policy, lr in self.policy_lr.items():
            if not 0.0 < lr < math.inf:
                raise ValueError(f"policy_lr.{policy} must be a finite number > 0, got {lr}")
        if self.steps < 0 or self.checkpoint_every < 0 or self.eval_samples < 0:
            raise ValueError("steps, checkpoint_every and eval_samples must be >= 0")


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


def resolve_device(name: str) -> torch.device:
    """The torch device of `LocalTrainConfig.device`; asking for cuda on a machine without one is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name!r} but torch sees no CUDA device here; use device=cpu or device=auto")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"device={name!r} but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return device


def make_tasks(config: LocalTrainConfig, split: Literal["train", "eval"], start: int, count: int) -> list[Task]:
    """Tasks `start`..`start+count-1` of a split: the same seed always gives the same boards."""
    return split_tasks(config.env, split, count, config.seed, config.env_options, start)


def warm_start_env_options(config: LocalTrainConfig) -> dict[str, Any]:
    """The env options of the warm-start boards: `env_options` with `warm_start.env_options` on top."""
    return {**config.env_options, **config.warm_start.env_options}


@dataclass(frozen=True)
class ExpertPair:
    """One warm-start example: the expert's move for `role` (served by `policy`) at the prompt `messages`."""

    policy: str
    role: str
    messages: tuple[Message, ...]
    move: str


@dataclass(frozen=True)
class CutMoves:
    """Expert moves longer (with eos) than the sampling limit `key` of their role: how many, and the longest."""

    key: str
    limit: int
    moves: int
    cut: int
    longest: int


class ExpertRecorder:
    """A `Generate` that records (policy, prompt, expert move) for the warm start and plays the expert's move with
    probability `play_skill`, else a corrupted copy (deterministic in seed, request and turn). Only the moves of
    `corrupt_roles` (None: every role) are ever corrupted."""

    def __init__(self, play_skill: float = 1.0, seed: int = 0, corrupt_roles: tuple[str, ...] | None = None) -> None:
        self.play_skill = play_skill
        self.seed = seed
        self.corrupt_roles = None if corrupt_roles is None else frozenset(corrupt_roles)
        self.pairs: list[ExpertPair] = []

    async def __call__(self, request: GenerationRequest) -> list[Generation]:
        if request.expert is None:
            raise ValueError(f"the environment gives no expert move for {request.request_id}: no warm start possible")
        self.pairs.append(ExpertPair(request.policy, request.role, request.messages, request.expert))
        rng = random.Random(f"{self.seed}|{request.request_id}|{request.turn}")
        exempt = self.corrupt_roles is not None and request.role not in self.corrupt_roles
        played = request.expert if exempt or rng.random() < self.play_skill else corrupt(request.expert, rng)
        return [Generation(text=played, prompt_ids=(), response_ids=())] * request.n


def collect_expert_pairs(config: LocalTrainConfig, router: PolicyRouter) -> list[ExpertPair]:
    """Expert moves at the states of warm-start episodes on training boards (never evaluation ones)."""
    recorder = ExpertRecorder(config.warm_start.play_skill, config.seed, config.warm_start.corrupt_roles)
    options = warm_start_env_options(config)
    tasks = split_tasks(config.env, "train", config.warm_start.tasks, config.seed, options, WARM_START_FIRST_INDEX)
    asyncio.run(rollout_tasks(tasks, recorder, router, RolloutConfig(k=1, with_expert=True)))
    return recorder.pairs


def expert_tokenizer(pairs: list[ExpertPair], vocab_size: int):
    """A tokenizer trained on the text of the expert data: every prompt message and every expert move."""
    texts = [m["content"] for pair in pairs for m in pair.messages] + [pair.move for pair in pairs]
    return train_tokenizer(texts, vocab_size=vocab_size)


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
    total_batches = config.epochs * math.ceil(len(examples) / config.batch_size)
    batch_index = 0
    order_rng = random.Random(seed)
    model.train()
    last_losses: list[float] = []
    for _ in range(config.epochs):
        order_rng.shuffle(examples)
        last_losses = []
        for start in range(0, len(examples), config.batch_size):
            prompts, responses = zip(*examples[start : start + config.batch_size], strict=True)
            for group in optimizer.param_groups:
                group["lr"] = warm_start_lr(config, batch_index, total_batches)
            batch_index += 1
            # Mean cross-entropy over the response tokens; logits are computed at response positions only.
            loss = -torch.cat(sequence_logprobs(model, prompts, responses, 1.0, tokenizer.pad_token_id)).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            last_losses.append(loss.item())
    return float(np.mean(last_losses)) if last_losses else 0.0


def warm_start_lr(config: WarmStartConfig, batch_index: int, total_batches: int) -> float:
    """The warm start's lr for one batch: constant, or a half cosine from `config.lr` (batch 0) towards zero."""
    if config.lr_schedule == "constant":
        return config.lr
    return config.lr * 0.5 * (1.0 + math.cos(math.pi * batch_index / total_batches))


def expert_moves_cut(tokenizer, pairs: list[ExpertPair], sampling: SamplingConfig) -> list[CutMoves]:
    """Per sampling limit that applies to some role: how many of those roles' expert moves exceed it."""
    lengths: dict[tuple[str, int], list[int]] = defaultdict(list)
    for pair in pairs:
        lengths[sampling.limit_for(pair.role)].append(len(tokenizer.encode(pair.move, add_special_tokens=False)) + 1)
    return [
        CutMoves(key, limit, len(found), sum(length > limit for length in found), max(found))
        for (key, limit), found in sorted(lengths.items())
    ]


def sample_advantages(samples: list[Sample], grouping: Grouping) -> torch.Tensor:
    """One scalar advantage per sample, from `at_grpo` as verl's registry serves it, under `grouping`."""
    rewards = torch.tensor([[s.reward] for s in samples], dtype=torch.float32)
    advantages, _ = registered_estimator()(
        token_level_rewards=rewards,
        response_mask=torch.ones_like(rewards),
        config=None,
        index=np.array([s.task_uid for s in samples], dtype=object),
        role=np.array([s.role for s in samples], dtype=object),
        turn=np.array([s.turn for s in samples], dtype=np.int64),
        grouping=grouping,
    )
    return advantages[:, 0]


def _require_known(key: str, kind: str, names: Iterable[str], known: Sequence[str], known_label: str) -> None:
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"{key} names unknown {kind} {unknown[0]!r}; {known_label}: {list(known)}")


def _require_same_roles(config: LocalTrainConfig, roles: Sequence[str]) -> None:
    """The warm-start boards' env must be valid and have the roles RL trains (checked even when no warm start runs)."""
    if not config.warm_start.env_options:  # the same env as training's, already built
        return
    try:
        warm_roles = make_env(config.env, **warm_start_env_options(config)).workflow().roles
    except ValueError as error:
        raise ValueError(f"warm_start.env_options: {error}") from error
    if list(warm_roles) != list(roles):
        raise ValueError(
            f"warm_start.env_options give the roles {list(warm_roles)}, but training has {list(roles)}: "
            "the warm start must teach the roles RL trains"
        )


class LocalRun:
    """One local training run's state: models (or adapters), trainers, generators, and its output folder.

    With `checkpoint`, the tokenizer is read from it and no warm start runs: `load` then fills in the weights.
    """

    def __init__(
        self, config: LocalTrainConfig, log: Callable[[str], None] = print, checkpoint: Path | None = None
    ) -> None:
        self.config = config
        self.log = log
        self.out = Path(config.output_dir)
        self.device = resolve_device(config.device)
        self.out.mkdir(parents=True, exist_ok=True)
        random.seed(config.seed)
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
        roles = make_env(config.env, **config.env_options).workflow().roles
        _require_same_roles(config, roles)
        self.router = PolicyRouter.from_spec(config.router, roles)
        _require_known("policy_lr", "policy", config.policy_lr, self.router.policies, "this router's policies")
        corrupt_roles = config.warm_start.corrupt_roles or ()
        _require_known("warm_start.corrupt_roles", "role", corrupt_roles, roles, f"{config.env}'s roles")
        limited = config.sampling.role_max_new_tokens
        _require_known("sampling.role_max_new_tokens", "role", limited, roles, f"{config.env}'s roles")
        self.env_factory: EnvFactory = default_env_factory
        # Expert moves train the tokenizer and feed the warm start: only a tiny model built from scratch needs them.
        from_scratch = checkpoint is None and not config.model.path
        pairs = collect_expert_pairs(config, self.router) if from_scratch else []
        if checkpoint is not None:
            self.tokenizer = load_tokenizer(checkpoint / TOKENIZER_DIR)
        elif config.model.path:
            self.tokenizer = load_tokenizer(config.model.path)
        else:
            self.tokenizer = expert_tokenizer(pairs, config.model.vocab_size)
        for cut in expert_moves_cut(self.tokenizer, pairs, config.sampling):
            if cut.cut:
                # The warm start teaches whole moves; a sampler that stops short turns each such move into a cut reply.
                log(
                    f"warning: {cut.cut} of {cut.moves} expert moves are longer than {cut.key}={cut.limit} "
                    f"(longest: {cut.longest} tokens with eos); sampled replies of that length are cut. "
                    f"Set {cut.key}={cut.longest} to leave room."
                )
        if config.lora.rank:
            self.models, self.trainers, served = self._adapter_policies(pairs)
        else:
            self.models, self.trainers, served = self._whole_model_policies(pairs)
        self.served: dict[str, PolicyModel] = served
        self.sampler = BatchingGenerator(served, config.sampling, seed=config.seed)
        greedy = dataclasses.replace(config.sampling, greedy=True)
        self.evaluator = BatchingGenerator(served, greedy, seed=config.seed)
        # Its own stream, restarted at every evaluation: evaluating never shifts the training samples, and every
        # evaluation draws with the same random numbers, so successive ones differ by the policy only.
        self.sampled_evaluator = BatchingGenerator(served, config.sampling, seed=config.seed + 1)
        self.sampled_evaluator_start = self.sampled_evaluator.rng_state()

    def _model(self, index: int) -> torch.nn.Module:
        spec = self.config.model
        if spec.path:
            return load_model(spec.path, device=self.device)
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
        ).to(self.device)

    def _warm_start(self, name: str, model: torch.nn.Module, pairs: list[tuple[tuple[Message, ...], str]]) -> None:
        if pairs:
            loss = warm_start(model, self.tokenizer, pairs, self.config.warm_start, self.config.seed)
            self.log(f"warm start {name}: {len(pairs)} expert moves, final loss {loss:.3f}")

    def _update_config(self, policy: str) -> UpdateConfig:
        lr = self.config.policy_lr.get(policy, self.config.update.lr)
        return dataclasses.replace(self.config.update, lr=lr)

    def _whole_model_policies(self, pairs: list[ExpertPair]) -> Policies:
        """One whole model per policy, each warm-started on its own roles' expert moves."""
        models, trainers, served = {}, {}, {}
        for index, policy in enumerate(self.router.policies):
            model = self._model(index)
            self._warm_start(policy, model, [(p.messages, p.move) for p in pairs if p.policy == policy])
            models[policy] = model
            trainers[policy] = PolicyTrainer(model, self._update_config(policy))
            served[policy] = PolicyModel(model, self.tokenizer)
        return models, trainers, served

    def _adapter_policies(self, pairs: list[ExpertPair]) -> Policies:
        """One base model, warm-started on every expert move, carrying one LoRA adapter per policy."""
        base = self._model(0)
        self._warm_start(LORA_BASE_MODEL, base, [(p.messages, p.move) for p in pairs])
        spec = self.config.lora
        lora = LoraConfig(
            r=spec.rank,
            lora_alpha=spec.alpha,
            target_modules=list(spec.target_modules),
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
        )
        policies = self.router.policies
        with torch.random.fork_rng(devices=[]):  # adapter init draws from its own seeded stream
            torch.manual_seed(self.config.seed)
            model = get_peft_model(base, lora, adapter_name=policies[0])
            for policy in policies[1:]:
                model.add_adapter(policy, lora)
        trainers = {
            policy: PolicyTrainer(model, self._update_config(policy), adapter_name=policy) for policy in policies
        }
        served = {policy: PolicyModel(model, self.tokenizer, adapter=policy) for policy in policies}
        return {LORA_BASE_MODEL: model}, trainers, served

    def rollout(
        self, tasks: list[Task], generator: BatchingGenerator, k: int, mode: RolloutMode
    ) -> list[EpisodeResult]:
        """The tree rollout, or K independent episodes per task (the no-tree ablation, and sampled evaluation)."""
        rollout = rollout_tasks if mode == "tree" else rollout_independent
        rollout_config = RolloutConfig(k=k, alpha=self.config.alpha)
        return asyncio.run(rollout(tasks, generator, self.router, rollout_config, self.env_factory))

    def evaluate(self) -> tuple[float, dict[str, float]]:
        """Success on the evaluation split: K = 1, greedy, independent rollouts; with `eval_samples`, also
        `eval_samples` sampled episodes per task under `eval_sampled/`."""
        tasks = make_tasks(self.config, "eval", 0, self.config.eval_tasks)
        metrics = rollout_metrics(self.rollout(tasks, self.evaluator, 1, "tree"), prefix="eval")
        if self.config.eval_samples:
            self.sampled_evaluator.set_rng_state(self.sampled_evaluator_start)
            sampled = self.rollout(tasks, self.sampled_evaluator, self.config.eval_samples, "independent")
            metrics |= rollout_metrics(sampled, prefix="eval_sampled")
        return metrics["eval/success"], metrics

    def train_step(self, step: int) -> dict[str, float]:
        config = self.config
        step_started = time.perf_counter()
        tasks = make_tasks(config, "train", step * config.tasks_per_step, config.tasks_per_step)
        stats = self.sampler.stats
        sampling_before, serving_before = stats.sampling_s, stats.serving_s
        results = self.rollout(tasks, self.sampler, config.k, config.rollout_mode)
        sampling_s = stats.sampling_s - sampling_before
        timing = {
            "time/rollout_s": time.perf_counter() - step_started,
            "time/generation_s": sampling_s,
            "time/generator_overhead_s": stats.serving_s - serving_before - sampling_s,
        }
        samples = [s for r in results for s in r.samples]
        metrics = rollout_metrics(results)
        if samples:
            started = time.perf_counter()
            advantages = sample_advantages(samples, config.grouping)
            timing["time/advantage_s"] = time.perf_counter() - started
            metrics |= self._update(samples, advantages, timing)
        timing["time/step_s"] = time.perf_counter() - step_started
        return metrics | timing

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
        """Restore a checkpoint written by `save`; returns its step and the metrics history up to it."""
        loaded = load_checkpoint(path, self.models, self.trainers)
        generators = torch.load(path / GENERATORS_FILE, weights_only=True)
        self.sampler.set_rng_state(generators["sampler"])
        self.evaluator.set_rng_state(generators["evaluator"])
        return loaded.step, loaded.extra["history"]


def config_json(config: LocalTrainConfig) -> str:
    return json.dumps(dataclasses.asdict(config), indent=2, default=str)


def read_config(path: Path) -> LocalTrainConfig:
    """The config a run saved as JSON (environment options replace the defaults' instead of merging into them)."""
    saved = json.loads(Path(path).read_text())
    return apply_overrides(dataclasses.replace(LocalTrainConfig(), env_options={}), saved)


def find_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory itself, else the latest under `path` or under `path/checkpoints` (a run's folder)."""
    path = Path(path)
    if is_checkpoint(path):
        return path
    for folder in (path, path / CHECKPOINT_DIR):
        found = latest_checkpoint(folder)
        if found is not None:
            return found
    raise ValueError(f"no checkpoint at {path} (neither a step_* checkpoint nor a folder holding one)")


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


def train(config: LocalTrainConfig, log: Callable[[str], None] = print) -> TrainSummary:
    """Warm start (or resume), evaluate, run AT-GRPO steps up to `config.steps` (evaluating every `eval_every`,
    checkpointing every `checkpoint_every` and at the end), and evaluate again."""
    checkpoint = resume_checkpoint(config, log)
    run = LocalRun(config, log, checkpoint)
    (run.out / CONFIG_FILE).write_text(config_json(config))
    if checkpoint is None:
        before, before_metrics = run.evaluate()
        log(f"eval success before RL: {before:.3f}")
        start, history = 0, [{"step": 0} | before_metrics]
    else:
        start, history = run.load(checkpoint)
        log(f"resumed from {checkpoint} at step {start}")
        saved = json.loads((checkpoint / CONFIG_FILE).read_text())
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
    sampled = [(h["step"], h["eval_sampled/success"]) for h in history if "eval_sampled/success" in h]
    if sampled:
        ax.plot(*zip(*sampled, strict=True), marker="s", label="held-out (sampled, K=1)")
    ax.set_xlabel("step")
    ax.set_ylabel("success")
    ax.set_ylim(-0.02, 1.02)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
