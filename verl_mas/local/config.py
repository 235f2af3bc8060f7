"""The local engine's config schema (`LocalTrainConfig` and its parts), its checks, and its JSON form."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import torch

from verl_mas.advantage import Grouping, check_grouping
from verl_mas.local.files import read_json
from verl_mas.local.generator import SamplingConfig
from verl_mas.local.update import UpdateConfig
from verl_mas.overrides import apply_overrides

RolloutMode = Literal["tree", "independent"]
WarmStartSchedule = Literal["cosine", "constant"]
WARM_START_SCHEDULES: tuple[str, ...] = get_args(WarmStartSchedule)
CONFIG_FILE = "config.json"  # a run's config, in its output folder and in each checkpoint


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
    """Supervised warm start on the environment's expert moves (tiny models start from random weights).

    Weights loaded from `model.path` are the start as they are, unless `tune_loaded` asks for a warm start of them too
    (a pretrained model's format tune). `lr` left None takes the model kind's default (`resolved_warm_start`): a tiny
    model built from scratch learns the format from nothing at a high rate; a pretrained one at a rate that keeps
    what pretraining taught.
    """

    tasks: int = 1024
    epochs: int = 6
    lr: float | None = None
    tune_loaded: bool = False
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
    # Of the corrupted moves, the share played as one of the env's near misses (`MultiAgentEnv.near_misses`: a
    # program one edit from right, a case with a wrong output) where it gives any; the rest are garbled copies. A
    # garbled move leads to states a model rarely meets after its own mistakes; a near miss leads to those it does
    # (a program that compiles and fails a case), so that the data teaches what to do there.
    near_misses: float = 0.0
    # Env options of the warm-start boards only, merged over `env_options`: e.g. size=5 warm-starts on smaller boards
    # than RL and evaluation play, so that RL has harder boards left to learn.
    env_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.play_skill <= 1.0:
            raise ValueError(f"warm_start.play_skill must be in [0, 1], got {self.play_skill}")
        if not 0.0 <= self.near_misses <= 1.0:
            raise ValueError(f"warm_start.near_misses must be in [0, 1], got {self.near_misses}")
        if self.corrupt_roles is not None and not (
            isinstance(self.corrupt_roles, tuple) and all(isinstance(role, str) for role in self.corrupt_roles)
        ):
            raise ValueError(f"warm_start.corrupt_roles must be a list of role names, got {self.corrupt_roles!r}")
        if not isinstance(self.tune_loaded, bool):
            raise ValueError(f"warm_start.tune_loaded must be true or false, got {self.tune_loaded!r}")
        if self.lr_schedule not in WARM_START_SCHEDULES:
            raise ValueError(f"warm_start.lr_schedule must be one of {WARM_START_SCHEDULES}, got {self.lr_schedule!r}")


SCRATCH_WARM_START_LR = 3e-3
# A short supervised tune of pretrained weights, at a rate common for fine-tuning models of this size; the scratch
# rate, 3e-3, is 150 times it.
PRETRAINED_WARM_START_LR = 2e-5


def trains_warm_start(config: LocalTrainConfig) -> bool:
    """Whether a fresh run of `config` warm-starts its model: one built from scratch always does; weights loaded from
    `model.path` only with `warm_start.tune_loaded` (else they are the start as they are, e.g. a saved warm start)."""
    return not config.model.path or config.warm_start.tune_loaded


def resolved_warm_start(config: LocalTrainConfig) -> WarmStartConfig:
    """`config.warm_start` with a None lr filled in for the model's kind (loaded from `model.path`, or built from
    scratch)."""
    if config.warm_start.lr is not None:
        return config.warm_start
    lr = PRETRAINED_WARM_START_LR if config.model.path else SCRATCH_WARM_START_LR
    return dataclasses.replace(config.warm_start, lr=lr)


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
    # Divide each group's centred rewards by the group's std (verl's algorithm.norm_adv_by_std_in_grpo); false keeps
    # the centring alone, so that a group whose rewards differ by little gets small advantages, not unit-sized ones.
    norm_adv_by_std: bool = True
    # Samples the judge could not run (the sandbox failed, not the model) are left out of training and counted as
    # mas/infra_failures; a step where they are more than this share of its samples stops the run.
    max_infra_failure_share: float = 0.1
    tasks_per_step: int = 16
    steps: int = 300
    eval_tasks: int = 256
    eval_every: int = 50
    # > 0: also evaluate the sampling policy itself (what RL trains): this many episodes per task at
    # sampling.temperature, as `eval_sampled/success`, next to greedy decoding's `eval/success`.
    eval_samples: int = 2
    seed: int = 0
    # The training sampler's seed (None: `seed`). Another value draws other samples on the same boards from the same
    # warm start, which measures how far two training runs drift apart on sampling alone.
    sampler_seed: int | None = None
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
        check_numbers(self)
        if not self.model.path and self.model.hidden % self.model.heads:
            raise ValueError(
                f"model.hidden ({self.model.hidden}) must be a multiple of model.heads ({self.model.heads})"
            )
        if self.device != "auto":
            try:
                torch.device(self.device)
            except (RuntimeError, TypeError) as error:
                raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {self.device!r}") from error
        if self.rollout_mode not in ("tree", "independent"):
            raise ValueError(f"rollout_mode must be 'tree' or 'independent', got {self.rollout_mode!r}")
        if self.resume == "":
            raise ValueError("resume must be true, false or a checkpoint path, got an empty string")
        check_grouping(self.grouping)
        if not isinstance(self.norm_adv_by_std, bool):
            raise ValueError(f"norm_adv_by_std must be true or false, got {self.norm_adv_by_std!r}")
        if self.update.temperature != self.sampling.temperature:
            raise ValueError(
                f"update.temperature ({self.update.temperature}) must equal sampling.temperature "
                f"({self.sampling.temperature}): training must score the distribution that was sampled"
            )


@dataclass(frozen=True)
class Range:
    """The values a numeric key allows: [low, high] (an open end excludes it), whole numbers when `integer`."""

    low: float = -math.inf
    high: float = math.inf
    integer: bool = False
    low_open: bool = False
    high_open: bool = False
    optional: bool = False  # None is allowed too

    def check(self, key: str, value: Any) -> None:
        if value is None and self.optional:
            return
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{key} must be {self.describe()}, got {value!r}")
        if self.integer and not isinstance(value, int):
            raise ValueError(f"{key} must be {self.describe()}, got {value!r}")
        below = value <= self.low if self.low_open else value < self.low
        above = value >= self.high if self.high_open else value > self.high
        if math.isnan(value) or math.isinf(value) or below or above:
            raise ValueError(f"{key} must be {self.describe()}, got {value!r}")

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        if self.low > -math.inf and self.high < math.inf:
            opening, closing = "(" if self.low_open else "[", ")" if self.high_open else "]"
            bounds = f" in {opening}{_number(self.low)}, {_number(self.high)}{closing}"
        elif self.low > -math.inf:
            bounds = f" {'>' if self.low_open else '>='} {_number(self.low)}"
        else:
            bounds = ""
        return kind + bounds + (" or null" if self.optional else "")


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


COUNT = Range(1, integer=True)
COUNT_OR_ZERO = Range(0, integer=True)
OPTIONAL_COUNT = Range(1, integer=True, optional=True)
RATE = Range(0, low_open=True)  # learning rates, temperatures, epsilons
WEIGHT = Range(0)  # coefficients that 0 switches off
PROBABILITY = Range(0, 1)
SEED = Range(0, 2**32 - 1, integer=True)  # numpy's seed range
OPTIONAL_SEED = Range(0, 2**32 - 1, integer=True, optional=True)

# Every numeric key of LocalTrainConfig, by its dotted name (a tuple's or mapping's rule holds for each item).
# NaN and infinities are refused everywhere: they surface, if at all, far from the key that caused them.
NUMERIC_KEYS: dict[str, Range] = {
    "k": COUNT,
    "alpha": WEIGHT,
    "max_infra_failure_share": PROBABILITY,
    "tasks_per_step": COUNT,
    "steps": COUNT_OR_ZERO,
    "eval_tasks": COUNT,
    "eval_every": COUNT,
    "eval_samples": COUNT_OR_ZERO,
    "seed": SEED,
    "sampler_seed": OPTIONAL_SEED,
    "checkpoint_every": COUNT_OR_ZERO,
    "model.hidden": COUNT,
    "model.layers": COUNT,
    "model.heads": COUNT,
    "model.vocab_size": COUNT,
    "model.max_positions": COUNT,
    "warm_start.tasks": COUNT,
    "warm_start.epochs": COUNT_OR_ZERO,
    "warm_start.lr": Range(0, low_open=True, optional=True),
    "warm_start.batch_size": COUNT,
    "warm_start.play_skill": PROBABILITY,
    "warm_start.near_misses": PROBABILITY,
    "sampling.temperature": RATE,
    "sampling.top_p": Range(0, 1, low_open=True),
    "sampling.top_k": COUNT_OR_ZERO,
    "sampling.max_new_tokens": COUNT,
    "sampling.role_max_new_tokens": COUNT,
    "update.lr": RATE,
    "update.weight_decay": WEIGHT,
    "update.betas": Range(0, 1, high_open=True),
    "update.eps": RATE,
    "update.grad_clip": Range(0, low_open=True, optional=True),
    "update.clip_ratio": RATE,
    "update.clip_ratio_low": Range(0, optional=True),
    "update.clip_ratio_high": Range(0, optional=True),
    "update.clip_ratio_c": Range(1, low_open=True),  # verl's dual clip requires c > 1
    "update.ppo_epochs": COUNT,
    "update.mini_batch_size": OPTIONAL_COUNT,
    "update.micro_batch_size": OPTIONAL_COUNT,
    "update.kl_coef": WEIGHT,
    "update.entropy_coeff": WEIGHT,
    "update.temperature": RATE,
    "update.shuffle_seed": Range(0, 2**63 - 1, integer=True),
    "policy_lr": RATE,
    "lora.rank": COUNT_OR_ZERO,
    "lora.alpha": RATE,
}


def check_numbers(config: LocalTrainConfig) -> None:
    """Every numeric key within its range, at construction: before any model is built or file written.

    Raises:
        ValueError: naming the key (with the item, for tuples and mappings), the allowed range and the value.
    """
    for key, allowed in NUMERIC_KEYS.items():
        value = _dotted(config, key)
        if isinstance(value, Mapping):
            for name, item in value.items():
                allowed.check(f"{key}.{name}", item)
        elif isinstance(value, tuple):
            for index, item in enumerate(value):
                allowed.check(f"{key}[{index}]", item)
        else:
            allowed.check(key, value)


def _dotted(config: Any, key: str) -> Any:
    for part in key.split("."):
        config = getattr(config, part)
    return config


def check_names(config: LocalTrainConfig, roles: Sequence[str], policies: Sequence[str]) -> None:
    """The keys that name roles or policies name ones the env and the router have (known only once both are built).

    Raises:
        ValueError: naming the key, the unknown name and the known ones.
    """
    _require_known("policy_lr", "policy", config.policy_lr, policies, "this router's policies")
    corrupt_roles = config.warm_start.corrupt_roles or ()
    _require_known("warm_start.corrupt_roles", "role", corrupt_roles, roles, f"{config.env}'s roles")
    limited = config.sampling.role_max_new_tokens
    _require_known("sampling.role_max_new_tokens", "role", limited, roles, f"{config.env}'s roles")


def _require_known(key: str, kind: str, names: Iterable[str], known: Sequence[str], known_label: str) -> None:
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"{key} names unknown {kind} {unknown[0]!r}; {known_label}: {list(known)}")


def config_json(config: LocalTrainConfig) -> str:
    """The config as JSON, the warm start's lr as it resolves for this model (the rate that ran)."""
    resolved = dataclasses.replace(config, warm_start=resolved_warm_start(config))
    return json.dumps(dataclasses.asdict(resolved), indent=2, default=str)


def read_config(path: Path) -> LocalTrainConfig:
    """The config a run saved as JSON (environment options replace the defaults' instead of merging into them)."""
    saved = read_json(Path(path))
    if not isinstance(saved, dict):
        raise ValueError(f"{path} holds no config (a JSON object), but {type(saved).__name__}")
    try:
        return apply_overrides(dataclasses.replace(LocalTrainConfig(), env_options={}), saved)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from error
