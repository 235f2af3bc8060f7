"""The study's runs as settings: the local config, verl's overrides, L2 variants' names, work folders, records."""

from __future__ import annotations

import argparse
from pathlib import Path

from research.verl_cpu.verl_cpu import comparison_keys, verl_overrides
from verl_mas.env import make_env
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.presets import PRESETS
from verl_mas.overrides import apply_overrides

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "runs" / "verl_learning"  # models, data, run folders (not kept)
DEFAULT_OUT = WORK / "data"  # the compact records the pages read (research/{verl,lora}_learning/data/)
ENGINES = ("local", "verl")
ROUTERS = ("shared", "per_role", "lora_per_role")
LORA_ROUTER = "lora_per_role"  # L2: the local engine's preset of that name, verl's mas.lora_per_role
L2_FIRST_STEPS = 100  # the first two L2 designs' budget: their folders and records carry no steps


def local_config(
    args: argparse.Namespace,
    out: Path,
    lr: float | None = None,
    rank: int | None = None,
    targets: tuple[str, ...] | None = None,
) -> LocalTrainConfig:
    """The local run's config; under L2 the preset's LoRA settings, with `lr`, `rank` and the adapted modules
    (`targets`) in their place where given."""
    keys = {"router": args.router, "checkpoint_every": args.eval_every, "output_dir": str(out)}
    if args.router == LORA_ROUTER:  # the preset's router (per_role) and LoRA settings; its output folder is ours
        keys |= {k: v for k, v in PRESETS[LORA_ROUTER].overrides.items() if k != "output_dir"}
        keys |= {"update": {"lr": lr}} if lr is not None else {}
        lora = ({"rank": rank} if rank is not None else {}) | ({"target_modules": targets} if targets else {})
        keys["lora"] = keys.get("lora", {}) | lora  # over the preset's LoRA keys, not in their place
    return apply_overrides(LocalTrainConfig(), comparison_keys(args) | keys)


def lora_preset() -> LocalTrainConfig:
    """The local `lora_per_role` preset's config: the settings an L2 run's names are told apart from."""
    return apply_overrides(LocalTrainConfig(), PRESETS[LORA_ROUTER].overrides)


def lora_variant(config: LocalTrainConfig) -> str:
    """The suffix of an L2 run's work folder and record: "" at the preset's lr, rank and adapted modules and the first
    L2 budget (the first L2 runs' names), else its lr and rank (`_lr0.001_r16`), its budget (`_steps200`) and its
    modules (`_targets-q_proj-...-down_proj`), so that runs at other settings never reuse or overwrite those: the
    local engine trains afresh into a folder that holds checkpoints, over a shorter run's."""
    if not config.lora.rank:
        return ""
    preset = lora_preset()
    name = ""
    if (config.update.lr, config.lora.rank) != (preset.update.lr, preset.lora.rank):
        name = f"_lr{config.update.lr:g}" + (f"_r{config.lora.rank}" if config.lora.rank != preset.lora.rank else "")
    name += "" if config.steps == L2_FIRST_STEPS else f"_steps{config.steps}"
    return name + targets_variant(config)


def targets_variant(config: LocalTrainConfig) -> str:
    """`_targets-<module>-...` when an L2 run adapts other modules than the preset's, else ""."""
    modules = config.lora.target_modules
    return (
        "" if not config.lora.rank or modules == lora_preset().lora.target_modules else "_targets-" + "-".join(modules)
    )


def pilot_record_name(router: str, seed: int, steps: int, targets: str = "") -> str:
    """An L2 pilot's record: ROUTER_pilot_seedS.json at the first L2 budget (the second design's pilot), else with
    `_stepsN`, and with its `targets_variant`, so that a pilot at another budget or on other modules never overwrites
    it."""
    return f"{router}_pilot_seed{seed}" + ("" if steps == L2_FIRST_STEPS else f"_steps{steps}") + targets + ".json"


def samples_per_policy(config: LocalTrainConfig) -> int:
    """The most samples one policy can get in a training step: K per task, turn and role it serves."""
    workflow = make_env(config.env, **config.env_options).workflow()
    roles_per_policy = len(workflow.roles) if config.router == "shared" else 1
    return config.tasks_per_step * config.k * workflow.max_turns * roles_per_policy


def with_keys(overrides: list[str], extra: dict[str, object]) -> list[str]:
    """`overrides` with the keys in `extra` set to its values (replaced where present, appended where not)."""
    kept = [o for o in overrides if o.split("=", 1)[0] not in extra]
    return kept + [f"{key}={value}" for key, value in extra.items()]


def verl_command(config: LocalTrainConfig, args: argparse.Namespace, model: Path, data: Path, out: Path) -> list[str]:
    base = verl_overrides(config, model, data, out)
    extra: dict[str, object] = {
        "actor_rollout_ref.actor.ppo_mini_batch_size": samples_per_policy(config),
        "data.shuffle": "false",  # the local engine's board order
        "trainer.save_freq": args.eval_every,
    }
    # verl's FSDP engine computes in bf16 unless told otherwise, while the CPU profile's vLLM samples in float32:
    # float32 here, as the local engine and the sampler, so that the actor's log-probs are the sampler's
    precision = "++actor_rollout_ref.actor.fsdp_config.mixed_precision"  # ++: whether or not the profile sets it
    extra |= {f"{precision}.{kind}_dtype": "fp32" for kind in ("param", "reduce", "buffer")}
    if config.lora.rank:  # L2: every role an adapter of the one base, in one worker group on one device
        extra |= {
            "mas.lora_per_role": "true",
            "actor_rollout_ref.model.lora_rank": config.lora.rank,
            "actor_rollout_ref.model.lora_alpha": int(config.lora.alpha),  # verl's field is an int
            "actor_rollout_ref.model.target_modules": f"[{','.join(config.lora.target_modules)}]",
        }
    elif config.router == "per_role":
        extra |= {"trainer.n_gpus_per_node": 2, "ray_kwargs.ray_init.num_gpus": 2}
    return with_keys(base, extra)


def seed_work(seed: int) -> Path:
    """The seed's work folder: its warm start is its own (seed 0's runs kept the folder's first layout)."""
    return WORK if seed == 0 else WORK / f"seed_{seed}"


def record_name(router: str, seed: int) -> str:
    """The compact record's file name: ROUTER.json for seed 0, ROUTER_seedS.json for the replication seeds."""
    return f"{router}.json" if seed == 0 else f"{router}_seed{seed}.json"
