"""Arms from one warm start: runs that differ by named sets of training keys, every arm of a seed started from one
saved warm start; the warm start's key and saving, the runs a folder already holds, and which of them finished."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_mas.local.config import (
    CONFIG_FILE,
    LocalTrainConfig,
    LoraSpec,
    WarmStartConfig,
    config_json,
    read_config,
    resolved_warm_start,
    trains_warm_start,
)
from verl_mas.local.files import read_json
from verl_mas.local.presets import apply_train_overrides
from verl_mas.local.reporting import read_metrics
from verl_mas.local.train import LocalRun
from verl_mas.local.warm_start import CutMoves, expert_moves_cut, warm_start_env_options

WARM_START_KEY_FILE = "warm_start_key.json"
EXPERT_MOVES_FILE = "expert_moves.json"  # per role, how many expert moves take each length in tokens
GREEDY, SAMPLED = "eval/success", "eval_sampled/success"
# Warm-start keys added after warm starts were first saved, with the default that plays as the code did before them:
# left out of the key at that default, so that a warm start saved before them is still found.
LATER_WARM_START_KEYS = {"near_misses": 0.0, "tune_loaded": False}


@dataclass(frozen=True)
class Arm:
    """One arm: the training keys its runs set on the shared config (`overrides`), and its seed's warm start, saved in
    the folder `start`, trained with `start_overrides` (which its runs set too). Arms naming one `start` share it."""

    overrides: Mapping[str, Any] = field(default_factory=dict)
    start: str = "warm_start"
    start_overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # the runs apply both sets, the start's last: a key the two set differently would be overruled silently
        runs, start = flat_keys(dict(self.overrides)), flat_keys(dict(self.start_overrides))
        clash = sorted(key for key in runs.keys() & start.keys() if key and runs[key] != start[key])
        if clash:
            raise ValueError(
                f"an arm sets {', '.join(clash)} one way for its runs ({', '.join(repr(runs[k]) for k in clash)}) and "
                f"another for its warm start ({', '.join(repr(start[k]) for k in clash)}): set each key once"
            )


def set_keys(arms: Sequence[Arm]) -> tuple[str, ...]:
    """The dotted training keys that some arm sets, for its runs or its warm start."""
    found = {key for arm in arms for keys in (arm.overrides, arm.start_overrides) if keys for key in flat_keys(keys)}
    return tuple(sorted(found))


def warm_start_key(config: LocalTrainConfig) -> str:
    """What a saved warm start depends on: a folder whose key file holds the same text is reused, not retrained.

    It plays the boards of `warm_start_env_options`, so one warm start serves every RL board size that shares them."""
    key = {
        "env": config.env,
        "env_options": warm_start_env_options(config),
        "seed": config.seed,
        "model": config.model,
        "warm_start": warm_start_text(dataclasses.replace(resolved_warm_start(config), env_options={})),
    }
    return json.dumps(key, indent=2, sort_keys=True, default=str)


def warm_start_text(warm_start: WarmStartConfig) -> str:
    """The warm-start settings as the key shows them: the dataclass's repr, less `LATER_WARM_START_KEYS` at their
    defaults."""
    shown = [
        f"{f.name}={getattr(warm_start, f.name)!r}"
        for f in dataclasses.fields(warm_start)
        if LATER_WARM_START_KEYS.get(f.name, object()) != getattr(warm_start, f.name)
    ]
    return f"{type(warm_start).__name__}({', '.join(shown)})"


def warm_start_run_config(config: LocalTrainConfig, folder: Path) -> LocalTrainConfig:
    """The run that warm-starts one whole model (router=shared, no LoRA) on every role's expert moves into `folder`:
    one start serves arms of any router (per-policy lrs name policies it lacks, so they are dropped)."""
    config = apply_train_overrides(config, {"router": "shared", "output_dir": str(folder)})
    return dataclasses.replace(config, lora=LoraSpec(), policy_lr={})


def arm_run_config(
    config: LocalTrainConfig, arm: Arm, start: str, folder: Path, resume: bool = False
) -> LocalTrainConfig:
    """`config` with the arm's keys, loading `start` as it is (a saved warm start, or model.path untuned), into
    `folder`; with `resume`, a run stopped part way continues from its latest checkpoint."""
    fixed: dict[str, Any] = {"model": {"path": start}, "warm_start": {"tune_loaded": False}, "output_dir": str(folder)}
    if resume:
        fixed["resume"] = True
    return apply_train_overrides(config, merged(arm.overrides, arm.start_overrides, fixed))


def merged(*overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Override sets merged key by key, nested ones too; a later set wins where two set one key."""
    result: dict[str, Any] = {}
    for found in overrides:
        for key, value in found.items():
            both_nested = isinstance(value, Mapping) and isinstance(result.get(key), Mapping)
            result[key] = merged(result[key], value) if both_nested else value
    return result


def ensure_warm_start(config: LocalTrainConfig, log: Callable[[str], None]) -> bool:
    """Save the warm start of `config` (a `warm_start_run_config`) to its output_dir, unless that folder's key file
    holds its key already; returns whether it was reused. The model, its tokenizer, its expert moves' lengths and the
    key go to a partial folder renamed when complete, replacing a warm start of other settings."""
    folder = Path(config.output_dir)
    key = warm_start_key(config)
    key_file = folder / WARM_START_KEY_FILE
    if key_file.is_file() and key_file.read_text() == key:
        log(f"reusing the warm start in {folder}")
        return True
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # left by a run stopped while saving
    run = LocalRun(config, log)
    (model,) = run.models.values()
    model.save_pretrained(str(partial))
    run.tokenizer.save_pretrained(str(partial))
    lengths = {role: {str(length): n for length, n in found.items()} for role, found in run.expert_move_lengths.items()}
    (partial / EXPERT_MOVES_FILE).write_text(json.dumps(lengths, indent=1) + "\n")
    (partial / WARM_START_KEY_FILE).write_text(key)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return False


def read_expert_move_lengths(folder: Path) -> dict[str, dict[int, int]] | None:
    """The lengths of the expert moves a saved warm start learnt (`EXPERT_MOVES_FILE`); None for a folder without
    them (a model given by path, or a warm start saved before the file existed)."""
    path = Path(folder) / EXPERT_MOVES_FILE
    if not path.is_file():
        return None
    return {role: {int(length): n for length, n in found.items()} for role, found in read_json(path).items()}


def flat_keys(value: Any, prefix: str = "") -> dict[str, Any]:
    """A JSON value's leaves by dotted key (`update.lr`); an empty object is a leaf."""
    if not isinstance(value, dict) or not value:
        return {prefix: value}
    leaves: dict[str, Any] = {}
    for key, item in value.items():
        leaves |= flat_keys(item, f"{prefix}.{key}" if prefix else key)
    return leaves


def json_differences(saved: Any, wanted: Any, free: Sequence[str] = ()) -> list[str]:
    """The dotted keys whose values differ between two JSON objects (one side missing a key counts), less those under
    a top-level key of `free`."""
    had, want = flat_keys(saved), flat_keys(wanted)
    missing = object()
    return sorted(
        key
        for key in had.keys() | want.keys()
        if key.split(".")[0] not in free and had.get(key, missing) != want.get(key, missing)
    )


def config_differences(saved: LocalTrainConfig, wanted: LocalTrainConfig, free: Sequence[str] = ()) -> list[str]:
    """The dotted keys whose values differ between two configs, less those under a top-level key of `free`."""
    return json_differences(json.loads(config_json(saved)), json.loads(config_json(wanted)), free)


@dataclass(frozen=True)
class SavedRun:
    """What config.output_dir holds for a config: the run's metrics, or why it holds no run of exactly that config."""

    history: list[dict[str, Any]] | None
    why_not: str | None = None


def saved_run(config: LocalTrainConfig, free: Sequence[str] = ()) -> SavedRun:
    """The metrics a run of this config (keys under `free` aside) saved in config.output_dir, finished or not; else
    why not.

    The saved config is read back through `read_config`, so a run saved before a key existed counts as run with that
    key's default (a new key's default keeps what the code did before it)."""
    folder = Path(config.output_dir)
    try:
        saved = read_config(folder / CONFIG_FILE)
        history = read_metrics(folder)
    except (OSError, ValueError) as exc:  # a missing file, unreadable JSON, or a key this code no longer knows
        return SavedRun(None, str(exc))
    differing = config_differences(saved, config, free)
    if differing:
        return SavedRun(None, "its saved config differs at " + ", ".join(differing))
    return SavedRun(history)


def reached_end(config: LocalTrainConfig, history: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a run's metrics reach config.steps and evaluate there."""
    return bool(history) and history[-1].get("step") == config.steps and GREEDY in history[-1]


def is_finished(config: LocalTrainConfig) -> bool:
    """Whether config.output_dir holds metrics that reached config.steps and evaluated there."""
    try:
        return reached_end(config, read_metrics(Path(config.output_dir)))
    except (OSError, ValueError):
        return False


def finished_history(config: LocalTrainConfig) -> list[dict[str, Any]] | None:
    """The metrics of a run that already finished in config.output_dir with exactly this config, else None."""
    history = saved_run(config).history
    return history if history is not None and reached_end(config, history) else None


@dataclass(frozen=True)
class ArmsPlan:
    """Every arm on every seed, each seed's arms from its warm starts, into `out`: seed S's warm starts and runs lie in
    `seed_dir` (formatted with the seed) under `out`, each run in a folder named after its arm; `baseline` is the arm
    the others are paired with. With `resume`, a run stopped part way continues from its latest checkpoint."""

    name: str
    base: LocalTrainConfig
    arms: Mapping[str, Arm]
    seeds: tuple[int, ...]
    out: Path
    baseline: str
    seed_dir: str = "seed_{seed}"
    resume: bool = False

    def __post_init__(self) -> None:
        if self.baseline not in self.arms:
            raise ValueError(f"baseline {self.baseline!r} is none of the arms {', '.join(self.arms)}")
        starts: dict[str, Arm] = {}
        for name, arm in self.arms.items():
            other = starts.setdefault(arm.start, arm)
            if other.start_overrides != arm.start_overrides:
                raise ValueError(f"arm {name}: its start {arm.start!r} is another arm's, trained with other keys")

    def seed_folder(self, seed: int) -> Path:
        return self.out / self.seed_dir.format(seed=seed)

    @property
    def saves_warm_start(self) -> bool:
        """Whether each seed's start is a warm start saved here (`trains_warm_start`): a model built from scratch, or
        loaded weights with `warm_start.tune_loaded`; loaded weights left as they are are every arm's start."""
        return trains_warm_start(self.base)

    def start_of(self, arm: str | None) -> Arm:
        """The arm (None: any arm, when all share one start) whose warm start is asked for."""
        if arm is not None:
            return self.arms[arm]
        if len({found.start for found in self.arms.values()}) > 1:
            raise ValueError(f"{self.name}: the arms have several warm starts; name the arm")
        return next(iter(self.arms.values()))

    def warm_start_path(self, seed: int, arm: str | None = None) -> str:
        """The model the arm starts from on `seed`: the seed's saved warm start, or `model.path` untuned."""
        if not self.saves_warm_start:
            return self.base.model.path
        return str(self.seed_folder(seed) / self.start_of(arm).start)

    def warm_start_config(self, seed: int, arm: str | None = None) -> LocalTrainConfig:
        """The run whose warm start the arm's runs on `seed` load."""
        config = apply_train_overrides(self.base, merged({"seed": seed}, self.start_of(arm).start_overrides))
        return warm_start_run_config(config, Path(self.warm_start_path(seed, arm)))

    def arm_config(self, seed: int, arm: str) -> LocalTrainConfig:
        """The arm's run on `seed`: the base config at that seed, the arm's keys, from its warm start."""
        config = apply_train_overrides(self.base, {"seed": seed})
        start = self.warm_start_path(seed, arm)
        return arm_run_config(config, self.arms[arm], start, self.seed_folder(seed) / arm, self.resume)

    def prepare_warm_start(self, seed: int, log: Callable[[str], None], arm: str | None = None) -> bool:
        """Save the arm's warm start of `seed` once (`ensure_warm_start`); returns whether one saved already served.
        With `model.path` given untuned, nothing is saved."""
        if not self.saves_warm_start:
            return False
        return ensure_warm_start(self.warm_start_config(seed, arm), log)

    def cut_expert_moves(self, seed: int, arm: str) -> list[CutMoves]:
        """The reply limits of the arm's runs that its warm start's expert moves exceed (none known: empty)."""
        lengths = read_expert_move_lengths(Path(self.warm_start_path(seed, arm)))
        if lengths is None:
            return []
        return [cut for cut in expert_moves_cut(lengths, self.arm_config(seed, arm).sampling) if cut.cut]

    def check_saved_folders(self, free: Sequence[str] = ()) -> None:
        """Each warm start or run the output folder already holds is of this plan's settings (a run's keys under `free`
        aside): one of others is an error naming its folder and the keys that differ, so that a re-run never mixes two
        experiments in one table."""
        for seed in self.seeds:
            for arm in self.arms:
                key_file = Path(self.warm_start_path(seed, arm)) / WARM_START_KEY_FILE
                if self.saves_warm_start and key_file.is_file():
                    wanted = warm_start_key(self.warm_start_config(seed, arm))
                    differing = json_differences(json.loads(key_file.read_text()), json.loads(wanted))
                    if differing:
                        raise ValueError(
                            f"output_dir: {key_file.parent} holds a warm start of other settings "
                            f"({', '.join(differing)}); choose another output_dir"
                        )
                config = self.arm_config(seed, arm)
                saved_file = Path(config.output_dir) / CONFIG_FILE
                if saved_file.is_file():
                    differing = config_differences(read_config(saved_file), config, free)
                    if differing:
                        raise ValueError(
                            f"output_dir: {saved_file.parent} holds a run of other settings ({', '.join(differing)}); "
                            "choose another output_dir"
                        )
