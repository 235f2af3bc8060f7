"""`python -m verl_mas.main`: the hydra entry point that checks the config and runs the AT-GRPO trainer on Ray."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from pprint import pprint
from typing import Any

import hydra
import ray
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config
from verl.utils.device import auto_set_device
from verl.utils.logging_utils import configure_verl_logging

from verl_mas import plugin  # registers the at_grpo estimator and the cpu platform in this process
from verl_mas.advantage import GroupingError
from verl_mas.dataset import read_tasks
from verl_mas.env import get_env_class, make_env
from verl_mas.install_commands import FLASH_ATTN_STEPS
from verl_mas.pretrained import PretrainedModelError, is_pretrained_name, prepared_path
from verl_mas.verl_engine.config import MasConfig, MasConfigError, check_supported, mas_config_of
from verl_mas.verl_engine.hooks import load_trainer_hooks

CONFIG_DIR = Path(__file__).resolve().parent / "config"
AGENT_LOOPS_FILE = CONFIG_DIR / "agent_loops.yaml"


def check_config(config: DictConfig) -> MasConfig:
    """Everything that can be checked before Ray starts: `mas:`, the trainer hooks (each imported and built once),
    what the AT-GRPO trainer supports, the GPU split between policies, the data files, verl's own validation.

    Fills in `actor_rollout_ref.rollout.agent.agent_loop_config_path` with verl-mas's agent-loop file when it is
    null, so that every agent-loop worker can build `mas_agent`.

    Raises:
        MasConfigError: naming the key (and the file and row for data) and what it accepts.
        GroupingError: mas.grouping names no grouping (`verl_mas.advantage.check_grouping`).
    """
    if "mas" not in config:
        raise MasConfigError("mas: missing; compose over verl_mas/config/mas_defaults.yaml")
    prepare_named_models(config)
    mas = MasConfig.from_mapping(OmegaConf.to_container(config.mas, resolve=True))
    load_trainer_hooks(config)
    if config.trainer.use_v1 is not True:
        raise MasConfigError(
            f"trainer.use_v1 must be true: the AT-GRPO trainer is a V1 trainer, got {config.trainer.use_v1!r}"
        )
    check_supported(config, mas)
    mas.gpus_per_policy(config.trainer.n_gpus_per_node)
    for key in ("data.train_files", "data.val_files"):
        check_data_files(key, OmegaConf.select(config, key), mas)
    fill_attention(config)
    check_attention(config)
    agent = config.actor_rollout_ref.rollout.agent
    if agent.agent_loop_config_path is None:
        agent.agent_loop_config_path = str(AGENT_LOOPS_FILE)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return mas


MODEL_PATH_KEYS = (
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.tokenizer_path",
    "actor_rollout_ref.model.hf_config_path",
)


def prepare_named_models(config: DictConfig) -> list[str]:
    """Replace a registered pretrained model's name (`verl_mas.pretrained`) by its converted folder wherever verl or
    `mas.policies` reads a model path, converting it here in the driver once; returns the keys replaced.

    The folder is in this machine's cache: on a cluster of several nodes, point $VERL_MAS_CACHE at a shared disk."""
    keys = list(MODEL_PATH_KEYS)
    keys += [f"mas.policies.{name}.model_path" for name in (OmegaConf.select(config, "mas.policies") or {})]
    replaced = []
    for key in keys:
        value = OmegaConf.select(config, key)
        if isinstance(value, str) and is_pretrained_name(value):
            try:
                OmegaConf.update(config, key, prepared_path(value, log=print), merge=False)
            except PretrainedModelError as error:
                raise MasConfigError(f"{key}={value}: {error}") from None
            replaced.append(key)
    return replaced


def flash_attn_importable() -> bool:
    """Whether flash-attn is installed in this environment (the workers of a one-node run share it)."""
    return importlib.util.find_spec("flash_attn") is not None


def fill_attention(config: DictConfig, flash_attn_installed: bool | None = None) -> str:
    """Fill in the attention keys mas_defaults.yaml leaves null: packed batches with flash-attention where flash-attn
    is installed (no padding tokens), else sdpa over padded batches; a key given explicitly is kept. Returns the
    path the run takes, as the doctor and the memory plan name it."""
    if flash_attn_installed is None:
        flash_attn_installed = flash_attn_importable()
    model = config.actor_rollout_ref.model
    with open_dict(model):
        if model.get("override_config") is None:
            model.override_config = {}
        if model.override_config.get("attn_implementation") is None:
            model.override_config.attn_implementation = "flash_attention_2" if flash_attn_installed else "sdpa"
        if model.get("use_remove_padding") is None:
            model.use_remove_padding = model.override_config.attn_implementation == "flash_attention_2"
    return "packed" if model.use_remove_padding else "padded"


def check_attention(config: DictConfig, flash_attn_installed: bool | None = None) -> None:
    """Flash-attention settings need the flash-attn package (not part of `verl-mas[gpu]`): refuse them at start
    rather than at model load on every worker."""
    if flash_attn_installed is None:
        flash_attn_installed = flash_attn_importable()
    if flash_attn_installed:
        return
    model = config.actor_rollout_ref.model
    wanted = []
    if (model.get("override_config") or {}).get("attn_implementation", "flash_attention_2") == "flash_attention_2":
        wanted.append("actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2")
    if model.get("use_remove_padding"):
        wanted.append("actor_rollout_ref.model.use_remove_padding=true")
    if wanted:
        raise MasConfigError(
            f"{' and '.join(wanted)} need flash-attn, which is not installed: install it "
            f"({FLASH_ATTN_STEPS}; docs/gpu.md#install) or set"
            " attn_implementation=sdpa use_remove_padding=false"
        )


def check_data_files(key: str, files: str | ListConfig | list[str] | None, mas: MasConfig) -> None:
    """Every local file of `key` exists and holds tasks of `mas.env` whose options resolve to the environment
    `mas.env_options` resolves to (see `resolved_env_options`: an option left out and the same option at its default
    are one environment), up to the environment's `problem_source_options` (which problems a task plays: train and
    eval rows may differ in them).

    A remote file (a path with a URL scheme, e.g. hdfs://) is left to verl, which copies it at start.
    """
    if files is None:
        raise MasConfigError(f"{key}: missing; write the files with `verl-mas data --env {mas.env} --out DIR`")
    paths = [files] if isinstance(files, str) else list(files)
    free = get_env_class(mas.env).problem_source_options
    resolved: dict[str, dict[str, Any]] = {}

    def compared(options: Mapping[str, Any]) -> dict[str, Any]:
        text = json.dumps(options, sort_keys=True, default=repr)
        if text not in resolved:
            resolved[text] = {k: v for k, v in resolved_env_options(mas.env, options).items() if k not in free}
        return resolved[text]

    expected = compared(mas.env_options)
    for path in paths:
        if "://" in str(path):
            continue
        try:
            tasks = read_tasks(Path(path).expanduser())
        except ValueError as exc:
            raise MasConfigError(f"{key}: {exc}") from None
        if not tasks:
            raise MasConfigError(f"{key}: {path}: the file holds no rows; a run needs at least one task")
        for number, task in enumerate(tasks):
            if task.env != mas.env:
                raise MasConfigError(f"{key}: {path}: row {number} is a {task.env!r} task, but mas.env is {mas.env!r}")
            found = compared(task.options)
            if found != expected:
                differences = ", ".join(
                    f"{name} (row: {_shown(found, name)}, mas.env_options: {_shown(expected, name)})"
                    for name in sorted(found.keys() | expected.keys())
                    if found.get(name, _ABSENT) != expected.get(name, _ABSENT)
                )
                raise MasConfigError(
                    f"{key}: {path}: row {number} was written with options {task.options}, but mas.env_options is "
                    f"{dict(mas.env_options)}; with the defaults filled in they differ in {differences}: write the "
                    "data with the same options"
                )


_ABSENT = object()


def _shown(options: Mapping[str, Any], name: str) -> str:
    return repr(options[name]) if name in options else "not an option"


def resolved_env_options(env: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options environment `env` runs with when built from `options`: every option, defaults filled in.

    Two option sets that resolve alike build the same environment (`{}` and `{'single_agent': False}` for sokoban).
    Read from the environment's config when it keeps one as a dataclass (`base_config`, as every built-in
    environment does: its checks and normalisations applied), else from its constructor's signature.

    Raises:
        MasConfigError: `options` are refused by the environment.
    """
    try:
        instance = make_env(env, **options)
    except ValueError as exc:
        raise MasConfigError(f"options {dict(options)} for environment {env!r}: {exc}") from None
    config = getattr(instance, "base_config", None)
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    try:
        bound = inspect.signature(type(instance)).bind(**options)
    except TypeError:  # the constructor took them (it was built above) but its signature does not say how
        return dict(options)
    bound.apply_defaults()
    resolved: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            resolved.update(value)
        elif kind is not inspect.Parameter.VAR_POSITIONAL:
            resolved[name] = value
    return resolved


@ray.remote
class MasTaskRunner(TaskRunnerV1.__ray_actor_class__):
    """verl's V1 task runner with the AT-GRPO trainer in place of the one `trainer.v1.trainer_mode` names."""

    def run(self, config: DictConfig) -> None:
        configure_verl_logging()

        import transfer_queue as tq

        from verl_mas.verl_engine.placement import check_logical_cpus
        from verl_mas.verl_engine.trainer import AtGrpoTrainer, run_pool_manager

        config.transfer_queue.enable = True
        pprint(OmegaConf.to_container(config, resolve=True))
        OmegaConf.resolve(config)
        self.config = config
        existing = bool(config.ray_kwargs.ray_init.get("address") or os.environ.get("RAY_ADDRESS"))
        manager = run_pool_manager(config, mas_config_of(config))  # before TransferQueue takes its CPUs
        check_logical_cpus(manager, config.transfer_queue, ray.cluster_resources().get("CPU", 0), existing)
        tq.init(config.transfer_queue)
        succeeded = False
        try:
            self.trainer = AtGrpoTrainer(config=config, pool_manager=manager)
            self.trainer.init()
            self.init_agent_loop_manager()
            self.trainer.fit(self.agent_loop_manager)
            succeeded = True
        finally:
            try:
                tracking = getattr(self.trainer, "logger", None)
                if tracking is not None:
                    tracking.finish(exit_code=0 if succeeded else 1)
            finally:
                tq.close()


def check_plugin(config: DictConfig, warn: Callable[[str], None]) -> None:
    """What verl-mas registers into verl is there in this process: `at_grpo` always, the `cpu` platform for a run on
    the CPU (`trainer.device=cpu`); a missing `cpu` platform elsewhere is only a warning (`warn`).

    Raises:
        RuntimeError: naming what is missing and why (the plugin's import error, or that verl did not load it).
    """
    on_cpu = config.trainer.device == "cpu" or os.environ.get("VERL_PLATFORM", "").strip().lower() == plugin.PLATFORM
    plugin.require_registered((plugin.ESTIMATOR, plugin.PLATFORM) if on_cpu else (plugin.ESTIMATOR,))
    if not on_cpu:
        for problem in plugin.registration_problems((plugin.PLATFORM,)):
            warn(f"verl_mas.main: warning: {problem} (needed only for a run on the CPU)")


CONFIG_PATH_FLAGS = ("--config-path", "-cp")


def config_path_from_cwd(argv: list[str], cwd: Path) -> list[str]:
    """`argv` with a relative `--config-path` (or `-cp`) made absolute against `cwd`, the current folder.

    hydra reads a relative one from this module's folder (verl_mas/), which no user means: `--config-path
    recipes/sudoku` from a checkout should read the checkout's recipe. A path with a scheme (`pkg://`) is kept.

    Raises:
        MasConfigError: the folder is not there, naming the path as given and as read, and the fix.
    """
    resolved = list(argv)
    for position, word in enumerate(argv):
        flag, equals, value = word.partition("=")
        if flag not in CONFIG_PATH_FLAGS:
            continue
        at = position if equals else position + 1
        if not equals:
            if at >= len(argv):
                break  # no value: hydra's own parser names it
            value = argv[at]
        if "://" in value or value.startswith("-") or Path(value).is_absolute():
            continue  # a package path, hydra's missing value (the next flag), or a folder named in full
        folder = cwd / value
        if not folder.is_dir():
            raise MasConfigError(
                f"--config-path {value}: no folder {folder} (a relative --config-path is read from the current "
                "folder); give the folder that holds the --config-name yaml, e.g. --config-path $PWD/recipes/sudoku"
            )
        resolved[at] = f"{flag}={folder.resolve()}" if equals else str(folder.resolve())
    return resolved


@hydra.main(config_path="config", config_name="mas_trainer", version_base=None)
def main(config: DictConfig) -> None:
    try:
        check_plugin(config, warn=lambda line: print(line, file=sys.stderr))
    except RuntimeError as error:  # a broken install: say what failed to import, before anything starts
        print(f"verl_mas.main: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    if config.trainer.device == "cpu":
        from verl_mas.cpu_platform import select_cpu

        select_cpu()
    auto_set_device(config)
    try:
        check_config(config)
    except (MasConfigError, GroupingError) as error:  # the message names the key: no hydra banner, no traceback
        print(f"verl_mas.main: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    warn_memory_plan(config, warn=lambda line: print(line, file=sys.stderr))
    run_ppo(config, task_runner_class=MasTaskRunner)


def warn_memory_plan(config: DictConfig, warn: Callable[[str], None], device_gib: float | None = None) -> None:
    """On a GPU platform, warn (never stop) when the memory plan of this config on this machine's first GPU has a
    peak over the device or a KV cache that cannot hold the sequences in flight; the CPU platform is not planned."""
    from verl_mas.verl_engine.memory_plan import plan_memory

    if config.trainer.device == "cpu":
        return
    if device_gib is None:
        device_gib = first_gpu_gib()
        if device_gib is None:
            warn(
                "verl_mas.main: warning: nvidia-smi shows no GPU, memory not planned (see verl-mas doctor --gpu-memory)"
            )
            return
    try:
        plan = plan_memory(config, device_gib)
    except ValueError as error:
        warn(f"verl_mas.main: warning: memory not planned: {error}")
        return
    for found in plan.warnings:
        warn(f"verl_mas.main: warning: memory plan (an estimate): {found.line()}")


def first_gpu_gib() -> float | None:
    """The first GPU's memory in GiB as nvidia-smi reports it (no CUDA context in this process, which would hold
    memory on that GPU for the whole run); None without nvidia-smi or a GPU."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return int(done.stdout.split()[0]) / 1024 if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def launch() -> None:
    """`python -m verl_mas.main`: hydra's main, a relative --config-path read from the current folder."""
    try:
        sys.argv[1:] = config_path_from_cwd(sys.argv[1:], Path.cwd())
    except MasConfigError as error:
        print(f"verl_mas.main: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    main()


if __name__ == "__main__":
    launch()
