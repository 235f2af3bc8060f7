"""`verl-mas ablate`: the named ablations (arms that differ in named sets of training keys), their plan from the
command's keys, checked before anything trains, and their run: one warm start per seed that every arm shares, every
arm from it, and the paired table (`ablate_report`), printed and written as JSON and Markdown."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_mas.data_files import write_text_atomic
from verl_mas.env import make_env
from verl_mas.local.ablate_report import BUDGET_GUIDE, AblationReport, ablation_report, budget_warnings
from verl_mas.local.arms import Arm, ArmsPlan, flat_keys, is_finished, set_keys
from verl_mas.local.callbacks import RunCallbacks
from verl_mas.local.config import SEED
from verl_mas.local.files import check_writable_dir
from verl_mas.local.presets import PRESETS, resolve_train_config
from verl_mas.local.train import RESUME_FREE_KEYS, train


@dataclass(frozen=True)
class Ablation:
    """Named arms, each the training keys it sets, every one paired per seed with the `baseline` arm."""

    arms: Mapping[str, Mapping[str, Any]]
    baseline: str
    description: str

    @property
    def keys(self) -> tuple[str, ...]:
        """The dotted training keys that some arm sets."""
        return set_keys([Arm(overrides) for overrides in self.arms.values()])


ABLATIONS: dict[str, Ablation] = {
    "grouping": Ablation(
        arms={arm: {"grouping": arm} for arm in ("task", "task_role", "task_role_turn")},
        baseline="task_role_turn",
        description="advantage groups per task (every role's and turn's rewards pooled), per (task, role), per (task, "
        "role, turn) (AT-GRPO)",
    ),
}
ABLATION_KEYS = ("seeds",)  # the command's own keys, next to the training keys
DEFAULT_SEEDS = 8
# Keys the command sets per seed or per arm itself: a user's value would break the pairing.
PER_SEED_KEYS = ("seed", "sampler_seed", "resume")
WARM_START_DIR = Arm().start
REPORT_JSON = "ablation.json"
REPORT_MARKDOWN = "ablation.md"


def plan_ablation(name: str, overrides: Mapping[str, Any]) -> ArmsPlan:
    """Check the ablation's name and keys and build its plan, before anything is trained.

    `overrides` are training keys (presets included) plus `seeds`: a count N (seeds 0..N-1) or a list of seeds, at
    least two. The output folder is `output_dir` when given, else runs/ablate_<name>.

    Raises:
        ValueError: naming the unknown ablation, the bad `seeds`, or the key that the arms set themselves.
    """
    if name not in ABLATIONS:
        raise ValueError(f"unknown ablation {name!r}; known ablations: {', '.join(ABLATIONS)}")
    ablation = ABLATIONS[name]
    overrides = dict(overrides)
    seeds = parse_seeds(overrides.pop("seeds", DEFAULT_SEEDS))
    for key in (*ablation.keys, *PER_SEED_KEYS):
        if overlaps(key, flat_keys(overrides)):
            raise ValueError(f"{key}: the ablation sets it for each {'seed' if key in PER_SEED_KEYS else 'arm'} itself")
    presets = overrides.get("preset", [])
    for preset in [presets] if isinstance(presets, str) else presets:
        known = flat_keys(dict(PRESETS[preset].overrides)) if preset in PRESETS else {}  # resolve names unknown ones
        taken = [key for key in (*ablation.keys, *PER_SEED_KEYS) if overlaps(key, known)]
        if taken:
            raise ValueError(f"preset={preset} sets {taken[0]}, which the ablation sets itself; leave the preset out")
    base = resolve_train_config(overrides, other_keys=ABLATION_KEYS)
    try:
        make_env(base.env, **base.env_options)
    except KeyError as error:  # an unknown env: its message lists the known ones
        raise ValueError(f"env: {error.args[0]}") from None
    out = Path(base.output_dir if "output_dir" in overrides else f"runs/ablate_{name}")
    check_writable_dir(out, "output_dir")
    arms = {arm: Arm(arm_overrides) for arm, arm_overrides in ablation.arms.items()}
    base = dataclasses.replace(base, output_dir=str(out))
    plan = ArmsPlan(name, base, arms, seeds, out, ablation.baseline, resume=True)
    plan.check_saved_folders(free=RESUME_FREE_KEYS)
    return plan


def overlaps(key: str, given: Mapping[str, Any]) -> bool:
    """Whether a dotted key of `given` is `key`, lies under it, or holds it."""
    return any(found == key or found.startswith(f"{key}.") or key.startswith(f"{found}.") for found in given)


def ablate_help() -> str:
    """What `verl-mas ablate --help` says before the training keys: the ablations, the command's keys, its output."""
    ablations = [
        f"  {name:<10} arms {'|'.join(ablation.arms)} (setting {', '.join(ablation.keys)}), each against "
        f"{ablation.baseline}:\n             {ablation.description}"
        for name, ablation in ABLATIONS.items()
    ]
    per_arm = sorted({key for ablation in ABLATIONS.values() for key in ablation.keys} | {*PER_SEED_KEYS})
    return "\n".join(
        [
            "arms that differ in named training keys, on your environment, before you spend GPU hours:",
            "  verl-mas ablate grouping env=my_game seeds=8 steps=200 [preset=NAME] [key=value ...]",
            "",
            "ablations:",
            *ablations,
            "",
            "ablate keys:",
            f"  seeds      a count N (seeds 0..N-1) or a list (seeds=[0,3,5]), at least 2 (default {DEFAULT_SEEDS})",
            "  output_dir the ablation's folder (default runs/ablate_NAME)",
            "",
            "Per seed, one warm start (saved once to seed_S/warm_start as one model trained on every role's expert",
            "moves: the tiny model's, or model.path's with warm_start.tune_loaded=true; model.path itself otherwise)",
            "is every arm's start, through model.path, with the same",
            "tasks, step budget and sampler seed. Each arm trains in seed_S/ARM, a normal run folder (config.json,",
            "metrics.jsonl, learning_curve.png, checkpoints/). The table goes to the terminal, ablation.json and",
            "ablation.md: held-out greedy and sampled success before and after, with the share of invalid moves and",
            "of zero-variance groups beside it, each arm's gain and each arm minus the baseline paired per seed",
            "(mean, SE, 95% t interval), and per arm the mean over training steps of every group_health/ metric.",
            "A warning heads the table when the warm start's expert moves are longer than the reply budget",
            f"(sampling.max_new_tokens): the smallest settings that can show anything are in {BUDGET_GUIDE}.",
            "Re-running the same command trains no finished arm; one stopped part way",
            "resumes from its latest checkpoint (checkpoint_every > 0), else trains again from its warm start.",
            f"The ablation sets {', '.join(per_arm)} itself",
            "(giving one is an error), and refuses a folder holding runs of other settings.",
        ]
    )


def parse_seeds(value: Any) -> tuple[int, ...]:
    """`seeds`: a count N >= 2 (seeds 0..N-1) or a list of at least two distinct seeds."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 2:
            raise ValueError(f"seeds must be at least 2 (a paired interval needs two seeds), got {value}")
        seeds = tuple(range(value))
    elif isinstance(value, list) and all(isinstance(seed, int) and not isinstance(seed, bool) for seed in value):
        seeds = tuple(value)
        if len(seeds) < 2 or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must list at least two distinct seeds, got {value}")
    else:
        raise ValueError(f"seeds must be a count (seeds=8) or a list of seeds (seeds=[0,3,5]), got {value!r}")
    for seed in seeds:
        SEED.check("seeds", seed)
    return seeds


def run_ablation(
    plan: ArmsPlan, log: Callable[[str], None] = print, callbacks: Sequence[RunCallbacks] = ()
) -> AblationReport:
    """Per seed: its warm start, then every arm from it (an arm already finished is not trained again; one stopped
    part way resumes from its latest checkpoint, or starts again without one); then the table, from every arm's
    metrics.jsonl, written to the output folder. `callbacks` go to every arm's run."""
    for seed in plan.seeds:
        plan.prepare_warm_start(seed, prefixed(log, f"seed {seed} warm start"))
        for warning in budget_warnings(plan, [seed]):  # before the arms spend their steps on cut replies
            log(f"[seed {seed}] warning: {warning}")
        for arm in plan.arms:
            config = plan.arm_config(seed, arm)
            arm_log = prefixed(log, f"seed {seed} {arm}")
            if is_finished(config):
                arm_log(f"finished already in {config.output_dir}: not trained again")
                continue
            train(config, log=arm_log, callbacks=callbacks)
    report = ablation_report(plan)
    plan.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(plan.out / REPORT_JSON, json.dumps(report.as_dict(), indent=2) + "\n")
    write_text_atomic(plan.out / REPORT_MARKDOWN, report.markdown() + "\n")
    return report


def prefixed(log: Callable[[str], None], label: str) -> Callable[[str], None]:
    return lambda message: log(f"[{label}] {message}")
