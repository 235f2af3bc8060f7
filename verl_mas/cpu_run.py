"""Launches `python -m verl_mas.main +platform=cpu` as a child session and reads back what it logged: the dry run
of a config on one machine, as the end-to-end tests and the verl-engine studies use it; and the tiny model and data
such a launch starts from."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from verl_mas.dataset import write_dataset
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.export import export_policies
from verl_mas.overrides import apply_overrides
from verl_mas.verl_engine.hooks import hook_overrides
from verl_mas.verl_engine.hooks.update_record import UpdateRecorder

LOG_FILE = "log.txt"
METRICS_FILE = "metrics.jsonl"  # verl's file logger: {"step": n, "data": {...}} per line
AUDIT_FILE = "audit.jsonl"  # the update audit (`hooks.update_record.UpdateRecorder`), with audit=True
AUDIT_HOOK = "update_record"  # its name under trainer_hooks: (add +trainer_hooks.update_record.capture=DIR to capture)


@dataclass(frozen=True)
class CpuRun:
    """One launch: its folder (log, metrics, update audit), exit code (None when it was killed) and wall time."""

    folder: Path
    returncode: int | None
    wall_s: float | None  # None: a run summarised after the fact, not timed here

    def log(self) -> str:
        return (self.folder / LOG_FILE).read_text(errors="replace")

    def metrics(self) -> list[dict]:
        return _jsonl(self.folder / METRICS_FILE)

    def audit(self) -> list[dict]:
        """The update audit, a record per step and policy: [] for a launch without audit=True, or before an update."""
        return _jsonl(self.folder / AUDIT_FILE)


def prepare_tiny_stack(
    root: Path, env_options: dict, warm_tasks: int, warm_epochs: int, n_train: int, n_eval: int
) -> None:
    """What a CPU launch on Plan-Path starts from: the local engine's tiny model, warm-started on `warm_tasks` boards
    for `warm_epochs` epochs and exported in HF format to root/model (2 heads: vLLM's CPU attention needs a head size
    of 32), and verl data files of `n_train` and `n_eval` rows in root/data."""
    config = apply_overrides(
        LocalTrainConfig(),
        {
            "env_options": env_options,
            "model": {"heads": 2},
            "warm_start": {"tasks": warm_tasks, "epochs": warm_epochs},
            "output_dir": str(root / "local"),
            "progress": False,
        },
    )
    export_policies(config, root / "model", log=lambda _: None)
    write_dataset("plan_path", root / "data", n_train=n_train, n_eval=n_eval, seed=0, options=env_options)


def tiny_stack_overrides(root: Path, env_options: dict, k: int, steps: int) -> list[str]:
    """The overrides a launch on `prepare_tiny_stack(root, env_options, ...)`'s model and data starts from: its files,
    the board options, `k` samples per turn over at most 3 turns of 4 tasks, 24-token answers, `steps` training steps
    (the caller adds validation, checkpoints and its own keys after these)."""
    return [
        f"actor_rollout_ref.model.path={root / 'model'}",
        f"data.train_files={root / 'data' / 'train.parquet'}",
        f"data.val_files={root / 'data' / 'eval.parquet'}",
        *(f"+mas.env_options.{key}={str(value).lower()}" for key, value in env_options.items()),
        f"mas.rollout.k={k}",
        "mas.rollout.max_turns=3",
        "data.train_batch_size=4",
        "data.max_prompt_length=1000",
        "data.max_response_length=24",
        "actor_rollout_ref.rollout.max_model_len=1024",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8192",
        f"trainer.total_training_steps={steps}",
    ]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def cpu_command(folder: Path, overrides: Sequence[str], audit: bool = False) -> list[str]:
    """The command line: the CPU profile, verl's file logger (and with `audit`, the update audit) into `folder`, then
    `overrides`."""
    return [
        sys.executable,
        "-m",
        "verl_mas.main",
        "+platform=cpu",
        *(hook_overrides(AUDIT_HOOK, UpdateRecorder, audit=folder / AUDIT_FILE) if audit else []),
        "trainer.logger=[console,file]",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={folder / METRICS_FILE}",
        *overrides,
    ]


def run_on_cpu(
    folder: str | Path,
    overrides: Sequence[str],
    timeout_s: float,
    kill_when: Callable[[], bool] | None = None,
    audit: bool = False,
) -> CpuRun:
    """Run one launch in its own session, so that Ray's processes go with it.

    With `kill_when`, the whole session is SIGKILLed as soon as `kill_when()` is true (a crash mid-run). With `audit`,
    the launch records what each actor update received (`UpdateRecorder` as `trainer_hooks.update_record`), which
    `CpuRun.audit` reads.

    Raises:
        TimeoutError: the launch ran past `timeout_s` (it is killed first); the message points to its log.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with (folder / LOG_FILE).open("w") as log:
        process = subprocess.Popen(
            cpu_command(folder, overrides, audit),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=folder,
        )
        killed = False
        try:
            while process.poll() is None:
                if kill_when is not None and kill_when():
                    killed = True
                    break
                if time.monotonic() - started > timeout_s:
                    raise TimeoutError(f"the CPU run ran past {timeout_s:.0f} s; see {folder / LOG_FILE}")
                time.sleep(1)
        finally:
            _kill_session(process)
    return CpuRun(folder, None if killed else process.returncode, time.monotonic() - started)


def _kill_session(process: subprocess.Popen) -> None:
    """SIGKILL the launch's session (the driver and what Ray started under it), then reap the driver."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
